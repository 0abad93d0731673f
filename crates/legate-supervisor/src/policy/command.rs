//! Reading the command of an `execute` call as parsed words, never as raw text.
//!
//! The command comes from the request's `rawInput`: `command` or `cmd`, as a string (a shell
//! script: Claude's `Bash`) or an array of words (an argv: Codex's
//! `["/bin/bash", "-lc", "…"]`). A string is split the way a POSIX shell splits it (quotes,
//! backslashes); an argv whose program is a shell run with `-c` is read as the script it runs.
//!
//! A shell wrapper is more than its script when the shell first runs files of its own: a login
//! shell (`bash -lc S`, `bash -l -c S`, `bash --login -c S`, `sh -lc S`) runs the profile files
//! of the agent-writable home, and `zsh` reads `~/.zshenv` even for `zsh -c S`. Such a wrapper
//! is read for its segments (deny and ask rules see `S`) but is never plain, so a rule that
//! allows `S` never allows it (issue 29, finding 2). Only `sh|bash|dash|ksh -c S` stands for `S`.
//!
//! A command is **plain** when it is exactly one simple command whose words are all literal:
//! no `;`, `&&`, `||`, `|`, `&`, newline, redirection, subshell, `$…` expansion, `$(…)` or
//! backtick substitution, glob, brace or tilde expansion, comment, leading `NAME=value`, and no
//! shell wrapper whose script is anything but plain. Only a plain command can match an `allow`
//! rule. Every command also yields its **segments**: the simple commands it is made of, those
//! inside substitutions and shell wrappers included, which `deny` and `ask` rules match (behind
//! a launcher such as `exec` or `sudo`, at any later word: see `Rule::check_command`). What
//! cannot be read at all (an unclosed quote, a `command` that is neither text nor a list of
//! text, nesting too deep) is **unreadable**: it matches every `deny` or `ask` rule on a program
//! and never an `allow`.
//!
//! This module never runs, resolves or looks up a program: a name is matched as text.

/// The `rawInput` keys that carry a command, in the order they are read.
pub const COMMAND_KEYS: &[&str] = &["command", "cmd"];

/// Directories whose programs are the system's own: `/usr/bin/cargo` is `cargo`.
pub const STANDARD_BIN_DIRS: &[&str] = &[
    "/bin",
    "/usr/bin",
    "/usr/local/bin",
    "/sbin",
    "/usr/sbin",
    "/usr/local/sbin",
];

/// Shells whose `-c SCRIPT` form is read as the script.
pub const SHELLS: &[&str] = &["sh", "bash", "dash", "zsh", "ksh"];

/// How deep substitutions and shell wrappers may nest before a command is unreadable.
const MAX_DEPTH: usize = 4;

/// A command, as parsed words.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Command {
    /// The words of the one simple command, when the command is plain (shell wrapper removed).
    pub plain: Option<Vec<String>>,
    /// Every simple command found in it (leading `NAME=value` words removed), for `deny` and
    /// `ask` rules.
    pub segments: Vec<Vec<String>>,
    /// Whether it could not be read; then it matches every `deny`/`ask` program rule.
    pub unreadable: bool,
}

impl Command {
    /// Reads the command of a `rawInput` value, if it carries one under [`COMMAND_KEYS`].
    pub fn from_raw_input(raw: Option<&serde_json::Value>) -> Option<Command> {
        let object = raw?.as_object()?;
        let value = COMMAND_KEYS.iter().find_map(|k| object.get(*k))?;
        Some(match value {
            serde_json::Value::String(script) => Command::from_script(script),
            serde_json::Value::Array(items) => {
                let words: Option<Vec<String>> = items
                    .iter()
                    .map(|v| v.as_str().map(str::to_owned))
                    .collect();
                match words {
                    Some(words) => Command::from_argv(words),
                    None => Command::unreadable(),
                }
            }
            _ => Command::unreadable(),
        })
    }

    /// A command read from shell text.
    pub fn from_script(script: &str) -> Command {
        let mut command = Command::default();
        command.plain = command.add_script(script, 0);
        command
    }

    /// A command given as an argv (each word literal, no shell in between).
    pub fn from_argv(words: Vec<String>) -> Command {
        let mut command = Command::default();
        command.plain = command.add_argv(words, 0);
        command
    }

    /// Text that could not be read as a command: it matches deny and ask rules only.
    pub fn unreadable() -> Command {
        Command {
            plain: None,
            segments: Vec::new(),
            unreadable: true,
        }
    }

    /// Adds the segments of `script`; returns its words if it is plain.
    fn add_script(&mut self, script: &str, depth: usize) -> Option<Vec<String>> {
        if depth > MAX_DEPTH {
            self.unreadable = true;
            return None;
        }
        let Some(parsed) = split(script) else {
            self.unreadable = true;
            return None;
        };
        for inner in &parsed.substitutions {
            self.add_script(inner, depth + 1);
        }
        let mut plain = None;
        let simple = parsed.segments.len() == 1 && parsed.literal;
        for (i, segment) in parsed.segments.into_iter().enumerate() {
            let assigned = segment.iter().take_while(|w| w.assignment).count();
            let words: Vec<String> = segment.into_iter().skip(assigned).map(|w| w.text).collect();
            if words.is_empty() {
                continue;
            }
            let inner = self.add_argv(words, depth);
            if i == 0 && simple && assigned == 0 {
                plain = inner;
            }
        }
        plain
    }

    /// Adds the segment `words` (and a wrapped shell script's); returns the plain words.
    fn add_argv(&mut self, words: Vec<String>, depth: usize) -> Option<Vec<String>> {
        if words.is_empty() {
            self.unreadable = true;
            return None;
        }
        let wrapped = shell_script(&words);
        self.segments.push(words.clone());
        match wrapped {
            Wrapped::No => Some(words),
            Wrapped::Script(script) => {
                let script = script.to_owned();
                self.add_script(&script, depth + 1)
            }
            Wrapped::Loose(script) => {
                let script = script.to_owned();
                self.add_script(&script, depth + 1);
                None
            }
            Wrapped::Missing => {
                self.unreadable = true;
                None
            }
        }
    }
}

fn is_assignment(word: &str) -> bool {
    match word.split_once('=') {
        Some((name, _)) => {
            let mut chars = name.chars();
            chars
                .next()
                .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
                && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
        }
        None => false,
    }
}

enum Wrapped<'a> {
    /// Not a shell running a script.
    No,
    /// `sh -c S`, `bash -c S`, `dash -c S`, `ksh -c S`: nothing before `-c`, nothing after `S`.
    Script(&'a str),
    /// A shell running `S` in some other form (a login shell, `zsh`, more flags, arguments
    /// after `S`): its segments are read, but it is never plain.
    Loose(&'a str),
    /// A shell told to run a script it was not given.
    Missing,
}

/// Whether `words` runs a shell on a script given with `-c` (or a flag cluster holding `c`).
fn shell_script(words: &[String]) -> Wrapped<'_> {
    let Some(name) = words.first().and_then(|p| program_name(p)) else {
        return Wrapped::No;
    };
    if !SHELLS.contains(&name) {
        return Wrapped::No;
    }
    let args = &words[1..];
    let is_c = |a: &String| {
        a.len() > 1
            && a.starts_with('-')
            && !a.starts_with("--")
            && a[1..].chars().all(|c| c.is_ascii_alphabetic())
            && a.contains('c')
    };
    let Some(at) = args.iter().position(is_c) else {
        // `bash script.sh`, `bash -x script.sh`, bare `bash`: a program with arguments.
        return Wrapped::No;
    };
    let Some(script) = args.get(at + 1) else {
        return Wrapped::Missing;
    };
    // A login shell (`-l`, `--login`, `-lc`) runs profile files first, and zsh reads
    // `~/.zshenv` for every shell: those run more than `S`, so only the bare form is strict.
    let strict = at == 0 && args[at] == "-c" && args.len() == 2 && name != "zsh";
    if strict {
        Wrapped::Script(script)
    } else {
        Wrapped::Loose(script)
    }
}

/// The bare name a program word stands for: the word itself when it has no `/`, or the file
/// name of an absolute path directly inside a [`STANDARD_BIN_DIRS`] directory (no `.` or `..`
/// anywhere). Anything else (`./cargo`, `/tmp/evil/cargo`, `/usr/bin/../../tmp/cargo`) stands
/// for no name at all and matches no program rule.
pub fn program_name(word: &str) -> Option<&str> {
    if word.is_empty() {
        return None;
    }
    let Some((parent, name)) = word.rsplit_once('/') else {
        return Some(word);
    };
    let clean = |part: &str| !part.is_empty() && part != "." && part != "..";
    if !clean(name) || !STANDARD_BIN_DIRS.contains(&parent) {
        return None;
    }
    Some(name)
}

/// One word of a script, and whether it is a `NAME=value` assignment (an unquoted name
/// before its first `=`).
#[derive(Debug)]
struct Word {
    text: String,
    assignment: bool,
}

/// A script split into simple commands.
#[derive(Debug, Default)]
struct Parsed {
    /// The words of each simple command, split at operators.
    segments: Vec<Vec<Word>>,
    /// The scripts inside `$(…)` and backticks.
    substitutions: Vec<String>,
    /// Whether no word used an expansion, and nothing but words was seen (no operator,
    /// redirection, comment).
    literal: bool,
}

/// The word being read and the simple command it belongs to.
#[derive(Default)]
struct Reader {
    parsed: Parsed,
    segment: Vec<Word>,
    word: String,
    in_word: bool,
    /// Something quoted, escaped or expanded is in the word: a later `=` assigns nothing.
    quoted: bool,
    assignment: bool,
}

impl Reader {
    /// Adds a character read without quotes.
    fn bare(&mut self, c: char) {
        if c == '=' && !self.quoted && !self.assignment && is_assignment(&format!("{}=", self.word))
        {
            self.assignment = true;
        }
        self.in_word = true;
        self.word.push(c);
    }

    /// Adds a character that was quoted or escaped.
    fn quoted(&mut self, c: char) {
        self.in_word = true;
        self.quoted = true;
        self.word.push(c);
    }

    fn end_word(&mut self) {
        if self.in_word {
            self.segment.push(Word {
                text: std::mem::take(&mut self.word),
                assignment: self.assignment,
            });
        }
        self.in_word = false;
        self.quoted = false;
        self.assignment = false;
    }

    fn end_segment(&mut self) {
        self.end_word();
        if !self.segment.is_empty() {
            self.parsed.segments.push(std::mem::take(&mut self.segment));
        }
    }
}

/// Splits `script` as a POSIX shell would split it into words and operators; `None` when it
/// cannot be read (an unclosed quote or substitution, a trailing backslash).
fn split(script: &str) -> Option<Parsed> {
    let chars: Vec<char> = script.chars().collect();
    let mut r = Reader::default();
    r.parsed.literal = true;
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        match c {
            ' ' | '\t' => {
                r.end_word();
                i += 1;
            }
            '\n' | ';' | '&' | '|' | '<' | '>' | '(' | ')' => {
                r.end_segment();
                r.parsed.literal = false;
                i += 1;
            }
            '#' if !r.in_word => {
                // A comment: the shell ignores the rest of the line; never plain.
                r.parsed.literal = false;
                while i < chars.len() && chars[i] != '\n' {
                    i += 1;
                }
            }
            '\'' | '"' => i = quoted_run(&chars, i, &mut r)?,
            '\\' => match chars.get(i + 1) {
                None => return None,
                Some('\n') => i += 2,
                Some(&n) => {
                    r.quoted(n);
                    i += 2;
                }
            },
            '$' | '`' => {
                r.parsed.literal = false;
                i = substitution(&chars, i, &mut r)?;
            }
            '*' | '?' | '[' | '{' | '}' => {
                r.parsed.literal = false;
                r.bare(c);
                i += 1;
            }
            '~' if !r.in_word => {
                r.parsed.literal = false;
                r.bare(c);
                i += 1;
            }
            _ => {
                r.bare(c);
                i += 1;
            }
        }
    }
    r.end_segment();
    Some(r.parsed)
}

/// Reads the quoted run opened by the quote at `chars[i]` (`'` or `"`) up to its closing
/// quote. Inside single quotes every character is itself; inside double quotes a backslash
/// escapes `$`, a backtick, `"`, `\` and a newline (before anything else it is itself), and
/// `$…` or a backtick is an expansion (never literal). Returns the index after the closing
/// quote; `None` if it never closes.
fn quoted_run(chars: &[char], mut i: usize, r: &mut Reader) -> Option<usize> {
    let quote = chars[i];
    let double = quote == '"';
    r.quoted = true;
    r.in_word = true;
    i += 1;
    loop {
        match chars.get(i) {
            None => return None,
            Some(&c) if c == quote => break,
            Some('\\') if double => match chars.get(i + 1) {
                None => return None,
                Some(&n @ ('$' | '`' | '"' | '\\')) => {
                    r.quoted(n);
                    i += 1;
                }
                Some('\n') => i += 1,
                Some(_) => r.quoted('\\'),
            },
            Some('$' | '`') if double => {
                r.parsed.literal = false;
                i = substitution(chars, i, r)?;
                continue;
            }
            Some(&ch) => r.quoted(ch),
        }
        i += 1;
    }
    Some(i + 1)
}

/// Reads a `$…` or backtick at `chars[i]`: a `$(…)` or backtick body is kept as a script to
/// parse; anything else is kept as text in the word (it is an expansion: never literal).
/// Returns the index after it; `None` if a substitution never closes.
fn substitution(chars: &[char], i: usize, r: &mut Reader) -> Option<usize> {
    r.in_word = true;
    r.quoted = true;
    if chars[i] == '`' {
        let mut j = i + 1;
        let mut body = String::new();
        loop {
            match chars.get(j) {
                None => return None,
                Some('`') => break,
                Some('\\') => {
                    if let Some(&n) = chars.get(j + 1) {
                        body.push(n);
                    }
                    j += 1;
                }
                Some(&ch) => body.push(ch),
            }
            j += 1;
        }
        r.parsed.substitutions.push(body);
        r.word.push_str("`…`");
        return Some(j + 1);
    }
    if chars.get(i + 1) != Some(&'(') {
        r.word.push('$');
        return Some(i + 1);
    }
    // `$(` … the matching `)`, counting parentheses outside quotes.
    let mut depth = 0usize;
    let mut j = i + 1;
    let mut quote: Option<char> = None;
    let start = i + 2;
    while let Some(&ch) = chars.get(j) {
        match (quote, ch) {
            (Some(q), c) if c == q => quote = None,
            (Some('"'), '\\') => j += 1,
            (Some(_), _) => {}
            (None, '\'' | '"') => quote = Some(ch),
            (None, '\\') => j += 1,
            (None, '(') => depth += 1,
            (None, ')') => {
                depth -= 1;
                if depth == 0 {
                    let body: String = chars[start..j].iter().collect();
                    r.parsed.substitutions.push(body);
                    r.word.push_str("$(…)");
                    return Some(j + 1);
                }
            }
            (None, _) => {}
        }
        j += 1;
    }
    None
}
