//! `legate serve`: the HTTP fronts, A2A (the default), MCP over Streamable HTTP (`--mcp`), the
//! dashboard (`--ui`), or any of them together from one process (each on its own port)
//! sharing one engine.
//!
//! Each front's module (`a2a`, `mcp`, `ui`) binds and builds its own router; this module only chooses
//! which, runs them side by side, and stops them together. A front that fails stops the other:
//! a server half up is worse than one that says why it is down.

use crate::config::Config;
use crate::front;
use anyhow::Result;
use std::net::IpAddr;
use std::process::ExitCode;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// How long running servers get to finish their responses after a stop signal.
const GRACE: Duration = Duration::from_secs(5);

/// Options of `legate serve`.
#[derive(Debug, clap::Args)]
pub struct ServeArgs {
    /// Serve A2A (the default when neither --a2a nor --mcp is given).
    #[arg(long)]
    pub a2a: bool,
    /// Serve MCP over Streamable HTTP at /mcp (with --a2a too: both, on two ports).
    #[arg(long)]
    pub mcp: bool,
    /// Serve the dashboard (alone, or beside --a2a and --mcp on a port of its own).
    #[arg(long)]
    pub ui: bool,
    /// The dashboard's port (default `ui.port`, 8733; 0 picks a free one). With --ui alone,
    /// --port sets it too.
    #[arg(long)]
    pub ui_port: Option<u16>,
    /// The address to listen on (default `a2a.host` / `mcp.host`, normally 127.0.0.1).
    #[arg(long)]
    pub host: Option<IpAddr>,
    /// The port of the front served (default 8732 for A2A, 8731 for MCP; 0 picks a free one).
    /// With both fronts, MCP's port.
    #[arg(long)]
    pub port: Option<u16>,
    /// A2A's port (the way to set it when both fronts are served).
    #[arg(long)]
    pub a2a_port: Option<u16>,
    /// The URL A2A cards advertise (default `http://<bound address>`).
    #[arg(long)]
    pub public_url: Option<String>,
    /// MCP: do not declare the Tasks extension; every tool is answered as a plain result.
    #[arg(long)]
    pub no_tasks: bool,
}

impl ServeArgs {
    /// The flags again, as `legate serve` reads them (for the service unit).
    pub fn to_args(&self) -> Vec<String> {
        let mut args = Vec::new();
        for (on, flag) in [
            (self.a2a, "--a2a"),
            (self.mcp, "--mcp"),
            (self.ui, "--ui"),
            (self.no_tasks, "--no-tasks"),
        ] {
            if on {
                args.push(flag.to_string());
            }
        }
        let valued = [
            ("--ui-port", self.ui_port.map(|p| p.to_string())),
            ("--host", self.host.map(|h| h.to_string())),
            ("--port", self.port.map(|p| p.to_string())),
            ("--a2a-port", self.a2a_port.map(|p| p.to_string())),
            ("--public-url", self.public_url.clone()),
        ];
        for (flag, value) in valued {
            if let Some(v) = value {
                args.push(flag.to_string());
                args.push(v);
            }
        }
        args
    }
}

/// Checks `args` as `legate serve` would, serving nothing (for `legate service install`).
pub fn check(config: &Config, args: &ServeArgs) -> Result<()> {
    plan(config, args).map(|_| ())
}

/// Which fronts to serve, and where.
#[derive(Debug, PartialEq, Eq)]
struct Plan {
    a2a: Option<(IpAddr, u16)>,
    mcp: Option<(IpAddr, u16)>,
    ui: Option<(IpAddr, u16)>,
}

fn plan(config: &Config, args: &ServeArgs) -> Result<Plan> {
    let ui = args.ui;
    if !ui && args.ui_port.is_some() {
        crate::fail!(InvalidInput, "--ui-port needs --ui");
    }
    let (a2a, mcp) = match (args.a2a, args.mcp) {
        (false, false) if !ui => (true, false),
        chosen => chosen,
    };
    let ui_port = match (a2a || mcp, args.ui_port) {
        (_, Some(p)) => p,
        (false, None) => args.port.unwrap_or(config.ui.port),
        (true, None) => config.ui.port,
    };
    if !a2a && args.a2a_port.is_some() {
        crate::fail!(
            InvalidInput,
            "--a2a-port needs --a2a (A2A is not served with --mcp alone)"
        );
    }
    if !a2a && args.public_url.is_some() {
        crate::fail!(
            InvalidInput,
            "--public-url is for A2A cards; add --a2a to serve A2A"
        );
    }
    let a2a_port = if mcp {
        args.a2a_port.unwrap_or(config.a2a.port)
    } else {
        args.a2a_port.or(args.port).unwrap_or(config.a2a.port)
    };
    let mcp_port = args.port.unwrap_or(config.mcp.port);
    if a2a && mcp && a2a_port == mcp_port && a2a_port != 0 {
        crate::fail!(
            InvalidInput,
            "A2A and MCP cannot share port {a2a_port}; give A2A another with --a2a-port"
        );
    }
    let ports = [(a2a, a2a_port, "A2A"), (mcp, mcp_port, "MCP")];
    if ui
        && let Some((_, _, other)) = ports
            .iter()
            .find(|(served, port, _)| *served && *port == ui_port && ui_port != 0)
    {
        crate::fail!(
            InvalidInput,
            "the dashboard and {other} cannot share port {ui_port}; give the dashboard another with --ui-port"
        );
    }
    Ok(Plan {
        a2a: a2a.then(|| (args.host.unwrap_or(config.a2a.host), a2a_port)),
        mcp: mcp.then(|| (args.host.unwrap_or(config.mcp.host), mcp_port)),
        ui: ui.then(|| (args.host.unwrap_or(config.ui.host), ui_port)),
    })
}

/// `legate serve`.
pub async fn serve(config: Config, args: ServeArgs) -> Result<ExitCode> {
    let plan = plan(&config, &args)?;
    let engine = front::start_serving_engine(&config.engine)?;
    // The same numbers as `/metrics`, over OTLP when the `OTEL_*` variables ask for it.
    let otlp_metrics = crate::metrics::otlp::start(&engine, "serve");
    let shutdown = CancellationToken::new();
    let tasks = !args.no_tasks;
    let result = run(&config, plan, args.public_url, tasks, &engine, &shutdown).await;
    if let Some(exporting) = otlp_metrics {
        exporting.shutdown().await;
    }
    engine.shutdown().await;
    result.map(|()| ExitCode::SUCCESS)
}

async fn run(
    config: &Config,
    plan: Plan,
    public_url: Option<String>,
    tasks: bool,
    engine: &legate_engine::Engine,
    shutdown: &CancellationToken,
) -> Result<()> {
    let mut servers = tokio::task::JoinSet::new();
    if let Some((host, port)) = plan.mcp {
        let (listener, router, tls) =
            crate::mcp::open(config, host, port, tasks, engine, shutdown).await?;
        let stop = shutdown.clone();
        let limits = config.mcp.limits;
        servers.spawn(async move {
            match tls {
                Some(tls) => {
                    legate_token::serve::serve_tls(listener, router, limits, tls, "mcp", stop)
                        .await;
                    Ok(())
                }
                None => legate_mcp::http::serve_with(listener, router, limits, stop)
                    .await
                    .map_err(anyhow::Error::from),
            }
        });
    }
    if let Some((host, port)) = plan.a2a {
        let opened = crate::a2a::open(config, host, port, public_url, engine).await?;
        if !opened.any_served {
            crate::fail!(
                AgentStartFailed,
                "no configured agent started; nothing to serve"
            );
        }
        let stop = shutdown.clone();
        let limits = config.a2a.limits;
        servers.spawn(async move {
            match opened.tls {
                Some(tls) => {
                    legate_token::serve::serve_tls(
                        opened.listener,
                        opened.router,
                        limits,
                        tls,
                        "a2a",
                        stop,
                    )
                    .await;
                    Ok(())
                }
                None => legate_a2a::serve_with(opened.listener, opened.router, limits, stop)
                    .await
                    .map_err(anyhow::Error::from),
            }
        });
    }
    if let Some((host, port)) = plan.ui {
        let opened = crate::ui::open(config, host, port, engine, shutdown).await?;
        let stop = shutdown.clone();
        let limits = config.ui.limits;
        servers.spawn(async move {
            legate_ui::serve_with(opened.listener, opened.router, limits, stop).await;
            // The run file removed once nothing listens there any more.
            drop(opened.run_file);
            Ok(())
        });
    }
    // Listening for the signal before saying so.
    let stop = front::stop_signal();
    crate::out!("Ctrl-C stops the server (and cancels running tasks).")?;
    {
        use std::io::Write as _;
        std::io::stdout().flush()?;
    }
    let outcome = tokio::select! {
        first = servers.join_next() => match first {
            Some(Ok(Ok(()))) | None => Ok(()),
            Some(Ok(Err(e))) => Err(e),
            Some(Err(e)) => Err(crate::coded!(Internal, "a front's server task failed: {e}")),
        },
        _ = stop => {
            eprintln!("stopping: running tasks are canceled");
            Ok(())
        }
    };
    shutdown.cancel();
    let _ = tokio::time::timeout(GRACE, async {
        while servers.join_next().await.is_some() {}
    })
    .await;
    outcome
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn args(a2a: bool, mcp: bool, port: Option<u16>, a2a_port: Option<u16>) -> ServeArgs {
        ServeArgs {
            a2a,
            mcp,
            ui: false,
            ui_port: None,
            host: None,
            port,
            a2a_port,
            public_url: None,
            no_tasks: false,
        }
    }

    fn config() -> Config {
        crate::config::load_in(std::path::Path::new("/nonexistent-legate-home"), &|_| None).unwrap()
    }

    #[test]
    fn a2a_is_the_default_and_port_goes_to_the_one_front_served() {
        let c = config();
        let p = plan(&c, &args(false, false, Some(9000), None)).unwrap();
        assert_eq!(p.a2a.map(|a| a.1), Some(9000));
        assert!(p.mcp.is_none());
        let p = plan(&c, &args(false, true, Some(9001), None)).unwrap();
        assert_eq!(p.mcp.map(|a| a.1), Some(9001));
        assert!(p.a2a.is_none());
    }

    #[test]
    fn both_fronts_take_two_ports() {
        let c = config();
        let p = plan(&c, &args(true, true, None, None)).unwrap();
        assert_eq!(p.a2a.map(|a| a.1), Some(legate_config::a2a::DEFAULT_PORT));
        assert_eq!(p.mcp.map(|a| a.1), Some(legate_config::mcp::DEFAULT_PORT));
        let p = plan(&c, &args(true, true, Some(9000), Some(9001))).unwrap();
        assert_eq!((p.mcp.unwrap().1, p.a2a.unwrap().1), (9000, 9001));
        // Port 0 twice is two free ports, not a clash.
        plan(&c, &args(true, true, Some(0), Some(0))).unwrap();
        let e = plan(&c, &args(true, true, Some(9000), Some(9000)))
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("INVALID_INPUT"), "{e}");
        let e = plan(&c, &args(false, true, None, Some(9000)))
            .unwrap_err()
            .to_string();
        assert!(e.contains("--a2a-port"), "{e}");
    }

    #[test]
    fn the_dashboard_serves_alone_or_beside_the_others_on_its_own_port() {
        let c = config();
        let ui = |a2a, mcp, port, ui_port| ServeArgs {
            ui: true,
            ui_port,
            ..args(a2a, mcp, port, None)
        };
        let p = plan(&c, &ui(false, false, Some(9000), None)).unwrap();
        assert_eq!(p.ui.map(|u| u.1), Some(9000));
        assert!(p.a2a.is_none() && p.mcp.is_none());
        let p = plan(&c, &ui(true, true, None, None)).unwrap();
        assert_eq!(p.ui.map(|u| u.1), Some(legate_ui::DEFAULT_PORT));
        assert!(p.a2a.is_some() && p.mcp.is_some());
        let e = plan(&c, &ui(false, true, Some(9000), Some(9000)))
            .unwrap_err()
            .to_string();
        assert!(e.contains("--ui-port"), "{e}");
        let e = plan(&c, &args(false, true, None, None))
            .map(|_| ())
            .and_then(|()| {
                plan(
                    &c,
                    &ServeArgs {
                        ui_port: Some(1),
                        ..args(false, true, None, None)
                    },
                )
                .map(|_| ())
            })
            .unwrap_err()
            .to_string();
        assert!(e.contains("--ui-port needs --ui"), "{e}");
    }
}
