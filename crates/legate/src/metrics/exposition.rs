//! The Prometheus text exposition format (version 0.0.4): `# HELP` and `# TYPE` lines, then
//! one sample a line, label values escaped (`\\`, `\"`, `\n`) whatever they hold.
//!
//! This module only writes text; which metrics exist and what their labels hold is the
//! engine's (`legate_engine::metrics`), and it never decides a number.

use std::fmt::Write as _;

/// The `Content-Type` of the format.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// A metric family's kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Goes up and down.
    Gauge,
    /// Only goes up (a restart starts it again).
    Counter,
    /// Buckets, a sum and a count.
    Histogram,
}

impl Kind {
    fn as_str(self) -> &'static str {
        match self {
            Self::Gauge => "gauge",
            Self::Counter => "counter",
            Self::Histogram => "histogram",
        }
    }
}

/// A document being written.
#[derive(Debug, Default)]
pub struct Exposition {
    out: String,
}

/// A label value escaped for the format: backslash, double quote and line feed.
pub fn escape_label(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for c in value.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out
}

/// A sample value as the format writes it.
fn number(v: f64) -> String {
    if v.is_nan() {
        "NaN".to_string()
    } else if v == f64::INFINITY {
        "+Inf".to_string()
    } else if v == f64::NEG_INFINITY {
        "-Inf".to_string()
    } else {
        format!("{v}")
    }
}

impl Exposition {
    /// Starts a family: its help (one line) and kind.
    pub fn family(&mut self, name: &str, kind: Kind, help: &str) {
        // Writing to a String cannot fail.
        let _ = writeln!(self.out, "# HELP {name} {}", help.replace('\n', " "));
        let _ = writeln!(self.out, "# TYPE {name} {}", kind.as_str());
    }

    /// One sample of `name` with `labels` (names are ours; values are escaped here).
    pub fn sample(&mut self, name: &str, labels: &[(&str, &str)], value: f64) {
        self.out.push_str(name);
        if !labels.is_empty() {
            self.out.push('{');
            for (i, (k, v)) in labels.iter().enumerate() {
                if i > 0 {
                    self.out.push(',');
                }
                let _ = write!(self.out, "{k}=\"{}\"", escape_label(v));
            }
            self.out.push('}');
        }
        let _ = writeln!(self.out, " {}", number(value));
    }

    /// A count as a sample (counts beyond 2^53 lose their last digits, as in every client).
    pub fn count(&mut self, name: &str, labels: &[(&str, &str)], value: u64) {
        self.sample(name, labels, value as f64);
    }

    /// The document.
    pub fn finish(self) -> String {
        self.out
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn label_values_are_escaped_and_numbers_written_as_the_format_says() {
        let mut e = Exposition::default();
        e.family("x_total", Kind::Counter, "What\nit counts.");
        e.count("x_total", &[("model", "a\"b\\c\nd"), ("agent", "r")], 3);
        e.sample("y", &[], f64::INFINITY);
        e.sample("y", &[], 0.25);
        let text = e.finish();
        assert_eq!(
            text,
            "# HELP x_total What it counts.\n# TYPE x_total counter\n\
             x_total{model=\"a\\\"b\\\\c\\nd\",agent=\"r\"} 3\ny +Inf\ny 0.25\n"
        );
    }
}
