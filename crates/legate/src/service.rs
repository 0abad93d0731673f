//! `legate service install|uninstall|status`: `legate serve` as a service of the user's own,
//! a systemd user unit on Linux, a launchd agent on macOS.
//!
//! The unit runs this very binary (its absolute path) with the `serve` flags given, the home
//! it was installed from (`LEGATE_HOME`), and nothing else of the environment: tokens are
//! read from their files in the home, never written into the unit. It restarts on failure.
//! `--dry-run` prints the unit and where it would go, and changes nothing. Installing checks
//! the flags as `legate serve` would, writes the unit, then asks the service manager to load
//! and start it; when that fails the unit written is removed again (`SERVICE_UNAVAILABLE`).
//!
//! This module only writes its own unit file and runs the service manager; it never edits
//! another unit, and never writes a token or a secret of the environment anywhere.

use crate::config::Config;
use crate::serve::ServeArgs;
use anyhow::Result;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

/// The systemd unit's name.
const UNIT: &str = "legate.service";
/// The launchd agent's label.
const LABEL: &str = "dev.legate.serve";

/// `legate service`.
#[derive(Debug, clap::Subcommand)]
pub enum ServiceCommand {
    /// Install and start `legate serve` with these flags as a user service.
    Install {
        /// Print the unit and where it would go; change nothing.
        #[arg(long)]
        dry_run: bool,
        #[command(flatten)]
        serve: ServeArgs,
    },
    /// Stop the service and remove its unit.
    Uninstall,
    /// Whether the unit is installed and the service runs.
    Status,
}

/// The service managers Legate writes units for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Manager {
    Systemd,
    Launchd,
}

impl Manager {
    fn here() -> Self {
        if cfg!(target_os = "macos") {
            Self::Launchd
        } else {
            Self::Systemd
        }
    }

    /// Where its unit goes for this user.
    fn unit_path(self) -> Result<PathBuf> {
        let home = std::env::var_os("HOME")
            .filter(|h| !h.is_empty())
            .map(PathBuf::from)
            .ok_or_else(|| crate::coded!(ServiceUnavailable, "HOME is not set"))?;
        Ok(match self {
            Self::Systemd => std::env::var_os("XDG_CONFIG_HOME")
                .filter(|d| !d.is_empty())
                .map(PathBuf::from)
                .filter(|d| d.is_absolute())
                .unwrap_or_else(|| home.join(".config"))
                .join("systemd/user")
                .join(UNIT),
            Self::Launchd => home
                .join("Library/LaunchAgents")
                .join(format!("{LABEL}.plist")),
        })
    }

    /// The unit running `exe` with `args` and `LEGATE_HOME=home`.
    fn render(self, exe: &Path, home: &Path, args: &[String]) -> Result<String> {
        let mut words = vec![text(exe)?, "serve".to_string()];
        for arg in args {
            words.push(text(Path::new(arg))?);
        }
        let home = text(home)?;
        Ok(match self {
            Self::Systemd => systemd_unit(&words, &home),
            Self::Launchd => launchd_plist(&words, &home),
        })
    }

    /// Loads and starts the installed unit.
    fn start(self, unit: &Path) -> Result<()> {
        match self {
            Self::Systemd => {
                manage("systemctl", &["--user", "daemon-reload"])?;
                manage("systemctl", &["--user", "enable", UNIT])?;
                // `restart`, not `enable --now`: a unit already running takes its new flags.
                manage("systemctl", &["--user", "restart", UNIT])
            }
            Self::Launchd => manage("launchctl", &["load", "-w", &text(unit)?]),
        }
    }

    /// Stops and unloads it (a unit that is not loaded is not an error).
    fn stop(self, unit: &Path) {
        let _ = match self {
            Self::Systemd => manage("systemctl", &["--user", "disable", "--now", UNIT]),
            Self::Launchd => text(unit).and_then(|u| manage("launchctl", &["unload", "-w", &u])),
        };
    }

    /// What the manager says of the service, in a word or a line.
    fn state(self) -> String {
        let out = match self {
            Self::Systemd => Command::new("systemctl")
                .args(["--user", "is-active", UNIT])
                .output(),
            Self::Launchd => Command::new("launchctl").args(["list", LABEL]).output(),
        };
        match out {
            Ok(o) => {
                let said = String::from_utf8_lossy(&o.stdout);
                let first = said.lines().next().unwrap_or("").trim();
                match (self, o.status.success()) {
                    (Self::Systemd, _) if !first.is_empty() => first.to_string(),
                    (Self::Launchd, true) => "loaded".to_string(),
                    _ => "not loaded".to_string(),
                }
            }
            Err(_) => "unknown (the service manager could not be run)".to_string(),
        }
    }
}

/// A path or flag as the unit's text: `INVALID_INPUT` unless UTF-8 without control characters
/// (a newline would start a line of its own in the unit).
fn text(path: &Path) -> Result<String> {
    match path.to_str() {
        Some(s) if !s.chars().any(char::is_control) => Ok(s.to_string()),
        _ => Err(crate::coded!(
            InvalidInput,
            "{} cannot be written into a unit (not UTF-8, or a control character)",
            path.display()
        )),
    }
}

/// One word of `ExecStart=`, quoted for systemd: in double quotes, `\` and `"` escaped, and
/// `$` and `%` doubled (no variable or specifier is expanded).
fn systemd_word(word: &str) -> String {
    let mut quoted = String::with_capacity(word.len() + 2);
    quoted.push('"');
    for c in word.chars() {
        match c {
            '\\' | '"' => {
                quoted.push('\\');
                quoted.push(c);
            }
            '$' => quoted.push_str("$$"),
            '%' => quoted.push_str("%%"),
            c => quoted.push(c),
        }
    }
    quoted.push('"');
    quoted
}

/// An `Environment=` assignment, quoted for systemd: `%` doubled (specifiers are expanded
/// there, variables are not).
fn systemd_env(assignment: &str) -> String {
    let escaped = assignment
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('%', "%%");
    format!("\"{escaped}\"")
}

fn systemd_unit(words: &[String], home: &str) -> String {
    let exec: Vec<String> = words.iter().map(|w| systemd_word(w)).collect();
    let env = systemd_env(&format!("LEGATE_HOME={home}"));
    format!(
        "# Written by `legate service install`; `legate service uninstall` removes it.\n\
         [Unit]\n\
         Description=Legate: delegation to confined coding agents (legate serve)\n\
         After=network.target\n\
         \n\
         [Service]\n\
         Type=exec\n\
         ExecStart={}\n\
         Environment={env}\n\
         Restart=on-failure\n\
         RestartSec=5\n\
         # Lets Legate give each agent a control group of its own (max_processes, max_memory_mb).\n\
         Delegate=yes\n\
         \n\
         [Install]\n\
         WantedBy=default.target\n",
        exec.join(" ")
    )
}

fn xml(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

fn launchd_plist(words: &[String], home: &str) -> String {
    let args: String = words
        .iter()
        .map(|w| format!("    <string>{}</string>\n", xml(w)))
        .collect();
    format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n\
         <!DOCTYPE plist PUBLIC \"-//Apple//DTD PLIST 1.0//EN\" \"http://www.apple.com/DTDs/PropertyList-1.0.dtd\">\n\
         <!-- Written by `legate service install`; `legate service uninstall` removes it. -->\n\
         <plist version=\"1.0\">\n<dict>\n\
         \x20 <key>Label</key>\n  <string>{LABEL}</string>\n\
         \x20 <key>ProgramArguments</key>\n  <array>\n{args}  </array>\n\
         \x20 <key>EnvironmentVariables</key>\n  <dict>\n    <key>LEGATE_HOME</key>\n    <string>{}</string>\n  </dict>\n\
         \x20 <key>RunAtLoad</key>\n  <true/>\n\
         \x20 <key>KeepAlive</key>\n  <dict>\n    <key>SuccessfulExit</key>\n    <false/>\n  </dict>\n\
         </dict>\n</plist>\n",
        xml(home)
    )
}

/// Runs the service manager: `SERVICE_UNAVAILABLE` with its own words when it fails.
fn manage(program: &str, args: &[&str]) -> Result<()> {
    let out = Command::new(program).args(args).output().map_err(|e| {
        anyhow::Error::from(legate_core::Error::caused_by(
            legate_core::ErrorCode::ServiceUnavailable,
            format!("{program} could not be run"),
            e,
        ))
    })?;
    if out.status.success() {
        return Ok(());
    }
    let said: String = String::from_utf8_lossy(&out.stderr)
        .trim()
        .chars()
        .take(300)
        .collect();
    Err(crate::coded!(
        ServiceUnavailable,
        "`{program} {}` failed: {}",
        args.join(" "),
        crate::render::terminal_text(&said)
    ))
}

/// `legate service …`.
pub fn service(config: &Config, command: ServiceCommand) -> Result<ExitCode> {
    let manager = Manager::here();
    let path = manager.unit_path()?;
    match command {
        ServiceCommand::Install { dry_run, serve } => {
            crate::serve::check(config, &serve)?;
            let exe = std::env::current_exe()
                .and_then(|e| e.canonicalize())
                .map_err(|e| {
                    anyhow::Error::from(legate_core::Error::caused_by(
                        legate_core::ErrorCode::ServiceUnavailable,
                        "the legate binary's own path could not be read",
                        e,
                    ))
                })?;
            let unit = manager.render(&exe, &config.engine.paths.home, &serve.to_args())?;
            if dry_run {
                crate::out!("# {}", path.display())?;
                crate::out!("{unit}")?;
                return Ok(ExitCode::SUCCESS);
            }
            install(manager, &path, &unit)?;
            crate::out!("installed and started: {}", path.display())?;
        }
        ServiceCommand::Uninstall => {
            if !path.exists() {
                crate::out!("not installed ({} does not exist)", path.display())?;
                return Ok(ExitCode::SUCCESS);
            }
            manager.stop(&path);
            std::fs::remove_file(&path).map_err(|e| {
                anyhow::Error::from(legate_core::Error::caused_by(
                    legate_core::ErrorCode::ServiceUnavailable,
                    format!("{} could not be removed", path.display()),
                    e,
                ))
            })?;
            if manager == Manager::Systemd {
                let _ = manage("systemctl", &["--user", "daemon-reload"]);
            }
            crate::out!("stopped and removed: {}", path.display())?;
        }
        ServiceCommand::Status => {
            if !path.exists() {
                crate::out!("not installed ({} does not exist)", path.display())?;
                return Ok(ExitCode::from(1));
            }
            crate::out!("installed: {}", path.display())?;
            crate::out!("state: {}", manager.state())?;
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// Writes `unit` at `path` and starts it; on failure puts back what was there before.
fn install(manager: Manager, path: &Path, unit: &str) -> Result<()> {
    let unavailable = |what: String, e: std::io::Error| {
        anyhow::Error::from(legate_core::Error::caused_by(
            legate_core::ErrorCode::ServiceUnavailable,
            what,
            e,
        ))
    };
    let before = std::fs::read(path).ok();
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)
            .map_err(|e| unavailable(format!("{} could not be made", dir.display()), e))?;
    }
    std::fs::write(path, unit)
        .map_err(|e| unavailable(format!("{} could not be written", path.display()), e))?;
    if let Err(e) = manager.start(path) {
        // Back to what was there: the old unit, or none (disabled first, so no link to it
        // stays in the manager's wants).
        match before {
            Some(old) => {
                let _ = std::fs::write(path, old);
            }
            None => {
                manager.stop(path);
                let _ = std::fs::remove_file(path);
            }
        }
        if manager == Manager::Systemd {
            let _ = manage("systemctl", &["--user", "daemon-reload"]);
        }
        return Err(e);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn systemd_words_expand_nothing() {
        assert_eq!(systemd_word("plain"), "\"plain\"");
        assert_eq!(
            systemd_word("a \"b\" $HOME %h \\"),
            "\"a \\\"b\\\" $$HOME %%h \\\\\""
        );
    }

    #[test]
    fn the_units_run_the_binary_with_the_flags_and_only_the_home() {
        let words = vec![
            "/opt/legate".to_string(),
            "serve".to_string(),
            "--mcp".to_string(),
        ];
        let unit = systemd_unit(&words, "/h");
        assert!(unit.contains("ExecStart=\"/opt/legate\" \"serve\" \"--mcp\"\n"));
        assert!(unit.contains("Environment=\"LEGATE_HOME=/h\"\n"));
        assert!(unit.contains("Restart=on-failure"));
        let plist = launchd_plist(&words, "/h&<x>");
        assert!(plist.contains("<string>/opt/legate</string>"));
        assert!(plist.contains("<string>/h&amp;&lt;x&gt;</string>"));
        assert!(plist.contains("<key>SuccessfulExit</key>"));
    }

    #[test]
    fn a_path_or_flag_with_a_newline_is_refused() {
        let e = text(Path::new("/a\nExecStartPre=/bin/evil")).unwrap_err();
        assert!(e.to_string().contains("cannot be written"), "{e}");
        let flags = vec![
            "--public-url".to_string(),
            "x\nExecStart=/bin/sh".to_string(),
        ];
        let e = Manager::Systemd
            .render(Path::new("/opt/legate"), Path::new("/h"), &flags)
            .unwrap_err();
        assert!(e.to_string().contains("cannot be written"), "{e}");
    }

    #[test]
    fn the_home_is_not_expanded_in_the_environment() {
        let unit = systemd_unit(&["/l".to_string()], "/a$b%c");
        assert!(
            unit.contains("Environment=\"LEGATE_HOME=/a$b%%c\"\n"),
            "{unit}"
        );
        assert!(unit.contains("Delegate=yes"), "{unit}");
    }
}
