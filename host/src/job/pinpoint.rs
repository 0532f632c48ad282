//! Where in a job file a parse error is.
//!
//! toml reports an error inside a `type`-tagged table (`[[source]]`,
//! `[[sink]]`) at the table's header: serde reads such a table whole before
//! it knows which variant it is, and the positions of its keys are gone by
//! then. A user told "line 3: unknown variant `sequnce`" has to search the
//! table for it. So when an error points at a table's header and names a
//! key or a value that exactly one line of that table holds, the error is
//! shown at that line instead; and serde's type names (`u64`, `f64`) are
//! said in words.

use std::ops::Range;

/// toml's `error` on `text`, pointed at the line it is about.
pub(super) fn describe(text: &str, error: &toml::de::Error) -> String {
    let message = in_words(error.message());
    let span = error.span();
    let moved = span.as_ref().and_then(|span| line_in_table(text, span, &message));
    let changed = moved.is_some() || message != error.message();
    match moved.or(span) {
        Some(span) if changed => render(text, span, &message),
        _ => error.to_string().trim_end().to_owned(),
    }
}

/// serde's names of number types, as a job file's author would say them.
fn in_words(message: &str) -> String {
    let words = [
        ("expected u64", "expected a whole number, 0 or more"),
        ("expected u32", "expected a whole number, 0 or more"),
        ("expected usize", "expected a whole number, 0 or more"),
        ("expected i64", "expected a whole number"),
        ("expected f64", "expected a number"),
    ];
    words.iter().fold(message.to_owned(), |message, (from, to)| message.replace(from, to))
}

/// The span of the key or value `message` names, if `span` is a table's
/// header and exactly one line of the tables under that header holds it.
/// (toml reports an error in any table of an array of tables, `[[source]]`,
/// at the first one's header.) Where several tables hold it, the one whose
/// other keys are all among those the message expects is meant.
fn line_in_table(text: &str, span: &Range<usize>, message: &str) -> Option<Range<usize>> {
    let header_start = text[..span.start].rfind('\n').map_or(0, |i| i + 1);
    let header = header_name(text[header_start..].lines().next()?)?;
    let wanted = Wanted::from_message(message)?;
    let mut candidates = Vec::new();
    for table in tables_under(text, &header) {
        let mut places = table.iter().filter_map(|&(offset, line)| {
            wanted.place_in(line).map(|place| offset + place.start..offset + place.end)
        });
        match (places.next(), places.next()) {
            (Some(place), None) => candidates.push((place, table)),
            (Some(_), Some(_)) => return None, // Two in one table: the header is the honest place.
            _ => {}
        }
    }
    if candidates.len() > 1 {
        let expected = expected_keys(message);
        candidates.retain(|(_, table)| {
            table.iter().filter_map(|(_, line)| Some(line.split_once('=')?.0.trim())).all(|key| {
                key == "type" || matches!(&wanted, Wanted::Key(k) if k == key) || expected.contains(&key)
            })
        });
    }
    match candidates.as_slice() {
        [(place, _)] => Some(place.clone()),
        _ => None,
    }
}

/// The lines (with their offsets in `text`) of each table whose header
/// line is `header`.
fn tables_under<'t>(text: &'t str, header: &str) -> Vec<Vec<(usize, &'t str)>> {
    let mut tables = Vec::new();
    let mut current: Option<Vec<(usize, &str)>> = None;
    let mut offset = 0;
    for line in text.split_inclusive('\n') {
        if let Some(name) = header_name(line) {
            tables.extend(current.take());
            if name == header {
                current = Some(Vec::new());
            }
        } else if let Some(table) = current.as_mut() {
            table.push((offset, line));
        }
        offset += line.len();
    }
    tables.extend(current);
    tables
}

/// A table header line as written without its spaces and comment
/// (`[[ source ]] # the file` → `[[source]]`); none for another line.
/// (A `#` inside a quoted key would be cut too: none of a job file's
/// tables has one.)
fn header_name(line: &str) -> Option<String> {
    let line = line.trim_start();
    if !line.starts_with('[') {
        return None; // Not a table's header: toml knew the place.
    }
    let header = line.split('#').next().unwrap_or(line);
    Some(header.chars().filter(|c| !c.is_whitespace()).collect())
}

/// The names after "expected one of" in a serde message.
fn expected_keys(message: &str) -> Vec<&str> {
    let Some(at) = message.find("expected one of ") else { return Vec::new() };
    message[at..].split('`').skip(1).step_by(2).collect()
}

/// What an error message names: a key, or a value as it is written.
enum Wanted {
    Key(String),
    Value(String),
}

impl Wanted {
    fn from_message(message: &str) -> Option<Wanted> {
        if let Some(key) = quoted(message, "unknown field `", '`') {
            return Some(Wanted::Key(key.to_owned()));
        }
        if let Some(variant) = quoted(message, "unknown variant `", '`') {
            return Some(Wanted::Value(format!("\"{variant}\"")));
        }
        if let Some(string) = quoted(message, "invalid type: string \"", '"') {
            return Some(Wanted::Value(format!("\"{string}\"")));
        }
        let literals = ["integer `", "floating point `", "boolean `"];
        let literal = literals.iter().find_map(|prefix| quoted(message, prefix, '`'))?;
        Some(Wanted::Value(literal.to_owned()))
    }

    /// Where in `line` (`key = value`) the wanted key or value is.
    fn place_in(&self, line: &str) -> Option<Range<usize>> {
        let (key, rest) = line.split_once('=')?;
        match self {
            Wanted::Key(wanted) => {
                let start = key.find(wanted.as_str())?;
                (key.trim() == wanted).then(|| start..start + wanted.len())
            }
            Wanted::Value(wanted) => {
                let value = rest.trim_start();
                let after = value.strip_prefix(wanted.as_str())?.trim();
                let start = key.len() + 1 + (rest.len() - value.len());
                (after.is_empty() || after.starts_with('#')).then(|| start..start + wanted.len())
            }
        }
    }
}

/// The text between `prefix` and the next `end` in `message`.
fn quoted<'a>(message: &'a str, prefix: &str, end: char) -> Option<&'a str> {
    let rest = &message[message.find(prefix)? + prefix.len()..];
    Some(&rest[..rest.find(end)?])
}

/// An error at `span` of `text`, drawn as toml draws its own.
fn render(text: &str, span: Range<usize>, message: &str) -> String {
    let line_start = text[..span.start].rfind('\n').map_or(0, |i| i + 1);
    let line = text[line_start..].lines().next().unwrap_or("");
    let number = text[..span.start].matches('\n').count() + 1;
    let column = text[line_start..span.start].chars().count() + 1;
    let width = text[span.start..span.end.min(line_start + line.len()).max(span.start)].chars().count().max(1);
    let gutter = " ".repeat(number.to_string().len());
    format!(
        "TOML parse error at line {number}, column {column}\n{gutter} |\n{number} | {line}\n{gutter} | {}{}\n{message}",
        " ".repeat(column - 1),
        "^".repeat(width)
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::job::JobSpec;

    const JOB: &str = "name = \"t\"\n\n[[source]]\nname = \"nums\"\ntype = \"generator\"\nmode = \"sequence\"\nevents = 100\n\n\
                       [[sink]]\nname = \"out\"\ntype = \"stdout\"\ninput = \"nums\"\n";

    /// The error of `JOB` with `from` replaced by `to`.
    fn error(from: &str, to: &str) -> String {
        let text = JOB.replacen(from, to, 1);
        let error = toml::from_str::<JobSpec>(&text).expect_err(to);
        describe(&text, &error)
    }

    #[test]
    fn an_error_in_a_tagged_table_is_shown_at_its_line() {
        let variant = error("mode = \"sequence\"", "mode = \"sequnce\"");
        assert!(variant.starts_with("TOML parse error at line 6, column 8\n  |\n6 | mode = \"sequnce\"\n  |        ^^^^^^^^^\n"), "{variant}");
        assert!(variant.ends_with("unknown variant `sequnce`, expected one of `sequence`, `words`, `sensors`, `logins`"), "{variant}");
        let field = error("events = 100", "evnets = 100");
        assert!(field.starts_with("TOML parse error at line 7, column 1\n  |\n7 | evnets = 100\n  | ^^^^^^\n"), "{field}");
        let negative = error("events = 100", "events = -5 # too few");
        assert!(negative.contains("7 | events = -5 # too few\n  |          ^^\n"), "{negative}");
        assert!(negative.ends_with("invalid value: integer `-5`, expected a whole number, 0 or more"), "{negative}");
        let string = error("events = 100", "events = \"many\"");
        assert!(string.contains("line 7, column 10"), "{string}");
    }

    #[test]
    fn an_error_in_a_later_table_of_an_array_is_shown_in_that_table() {
        let second = "\n[[source]]\nname = \"lines\"\ntype = \"file\"\npath = \"x.txt\"\nparallelism = 1\n";
        let text = JOB.replace("\n[[sink]]", &format!("{second}\n[[sink]]"));
        let alone = describe(&text, &toml::from_str::<JobSpec>(&text).expect_err("parallelism in a file source"));
        assert!(alone.starts_with("TOML parse error at line 13, column 1\n"), "{alone}");
        // Both tables set `parallelism`; only the file source may not.
        let both = text.replace("events = 100", "events = 100\nparallelism = 1");
        let error = describe(&both, &toml::from_str::<JobSpec>(&both).expect_err("parallelism in a file source"));
        assert!(error.starts_with("TOML parse error at line 14, column 1\n"), "{error}");
        let commented = both.replace("[[source]]\nname = \"lines\"", "[[ source ]] # the file\nname = \"lines\"");
        let error = describe(&commented, &toml::from_str::<JobSpec>(&commented).expect_err("parallelism in a file source"));
        assert!(error.starts_with("TOML parse error at line 14, column 1\n"), "{error}");
    }

    #[test]
    fn an_error_without_one_line_to_show_stays_at_the_table() {
        let missing = error("name = \"nums\"\n", "");
        assert!(missing.starts_with("TOML parse error at line 3, column 1\n"), "{missing}");
        assert!(missing.contains("missing field `name`"), "{missing}");
        // toml already knew the place of an error outside tagged tables.
        let top = error("name = \"t\"", "name = 5");
        assert!(top.starts_with("TOML parse error at line 1, column 8\n"), "{top}");
    }
}
