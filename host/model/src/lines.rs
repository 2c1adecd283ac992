//! Where things are written in a definition's text. The serde model keeps
//! no spans, so lines are found in the text itself.

/// Where each `id: <value>` is written. The serde model has no spans, so
/// lines are found in the text, once: a step written in flow style on one
/// line is found the same way.
pub(super) struct IdLines(std::collections::HashMap<String, Vec<usize>>);

impl IdLines {
    pub(super) fn index(source: &str) -> Self {
        let mut lines: std::collections::HashMap<String, Vec<usize>> = Default::default();
        for (n, line) in source.lines().enumerate() {
            if let Some(value) = id_value(line) {
                lines.entry(value.to_owned()).or_default().push(n + 1);
            }
        }
        Self(lines)
    }

    /// The line of the `skip`-th (from 0) `id: <id>`.
    pub(super) fn line(&self, id: &str, skip: usize) -> Option<usize> {
        self.0.get(id)?.get(skip).copied()
    }
}

/// The value of the first `id:` key on `line` that starts an entry (at the
/// start of the line, or after `-`, `{` or `,`).
fn id_value(line: &str) -> Option<&str> {
    for key in ["id", "\"id\"", "'id'"] {
        for (at, _) in line.match_indices(key) {
            let before = line[..at].trim_end();
            let starts_entry = before.is_empty()
                || before.ends_with('-')
                || before.ends_with('{')
                || before.ends_with(',');
            let Some(rest) = line[at + key.len()..].trim_start().strip_prefix(':') else {
                continue;
            };
            if !starts_entry {
                continue;
            }
            let rest = rest.trim_start().trim_start_matches(['"', '\'']);
            let end = rest
                .find(|c: char| !(c.is_alphanumeric() || c == '_' || c == '-'))
                .unwrap_or(rest.len());
            return Some(&rest[..end]);
        }
    }
    None
}

/// The first line where `key:` is written with `value` (any value when empty).
pub(super) fn find_key_line(source: &str, key: &str, value: &str) -> Option<usize> {
    source
        .lines()
        .position(|line| line_has_key_value(line, key, value))
        .map(|n| n + 1)
}

fn line_has_key_value(line: &str, key: &str, value: &str) -> bool {
    let quoted = [format!("\"{key}\""), format!("'{key}'"), key.to_owned()];
    quoted.iter().any(|k| {
        line.match_indices(k.as_str()).any(|(at, _)| {
            let before = line[..at].trim_end();
            let starts_entry = before.is_empty()
                || before.ends_with('-')
                || before.ends_with('{')
                || before.ends_with(',');
            let rest = line[at + k.len()..].trim_start();
            let Some(rest) = rest.strip_prefix(':') else {
                return false;
            };
            let rest = rest.trim_start().trim_start_matches(['"', '\'']);
            starts_entry
                && (value.is_empty()
                    || rest.strip_prefix(value).is_some_and(|after| {
                        !after.starts_with(|c: char| c.is_alphanumeric() || c == '_' || c == '-')
                    }))
        })
    })
}
