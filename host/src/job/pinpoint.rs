//! Where in a job file a parse error is.
//!
//! toml reports an error inside a `type`-tagged table (`[[source]]`,
//! `[[sink]]`) at the table's header: serde reads such a table whole before
//! it knows which variant it is, and the positions of its keys are gone by
//! then. A user told "line 3: unknown variant `sequnce`" has to search the
//! table for it. So when an error points at a table's header and names a
//! key or a value that exactly one line of that table holds (in an inline
//! table on that line too), the error is shown at that key or value
//! instead; and serde's type names (`u64`, `f64`) are said in words.

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

    /// Where in `line` (`key = value`, the value perhaps an inline
    /// table of such pairs) the wanted key or value is.
    fn place_in(&self, line: &str) -> Option<Range<usize>> {
        pairs(line, 0).into_iter().find_map(|(key, value)| match self {
            Wanted::Key(wanted) => (&line[key.clone()] == wanted).then_some(key),
            Wanted::Value(wanted) => (&line[value.clone()] == wanted).then_some(value),
        })
    }
}

/// The spans of the keys and values of `text` (`key = value`, from
/// `offset` of a line): its own pair, then those of an inline table it
/// holds (`alignment = { group = "a", max_drift_ms = -1 }`), in order.
fn pairs(text: &str, offset: usize) -> Vec<(Range<usize>, Range<usize>)> {
    let Some((key, rest)) = text.split_once('=') else { return Vec::new() };
    let value = &rest[..outside_quotes(rest).find(|&(_, c)| c == '#').map_or(rest.len(), |(i, _)| i)];
    let key = trimmed(key, offset);
    let value = trimmed(value, offset + text.len() - rest.len());
    let mut found = vec![(key, value.clone())];
    let inner = &text[value.start - offset..value.end - offset];
    if let Some(table) = inner.strip_prefix('{').and_then(|inner| inner.strip_suffix('}')) {
        let mut start = 0;
        let commas = outside_quotes(table).filter(|&(_, c)| c == ',').map(|(i, _)| i);
        for end in commas.chain([table.len()]) {
            found.extend(pairs(&table[start..end], value.start + 1 + start));
            start = end + 1;
        }
    }
    found
}

/// The characters of `text` outside quoted strings, arrays and inline
/// tables, with their offsets.
fn outside_quotes(text: &str) -> impl Iterator<Item = (usize, char)> + '_ {
    let (mut quote, mut depth) = (None, 0u32);
    text.char_indices().filter(move |&(_, c)| {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some(_), _) => {}
            (None, '"' | '\'') => quote = Some(c),
            (None, '[' | '{') => depth += 1,
            (None, ']' | '}') => depth = depth.saturating_sub(1),
            (None, _) => return depth == 0,
        }
        false
    })
}

/// The span of `text` (at `offset`) without its surrounding spaces.
fn trimmed(text: &str, offset: usize) -> Range<usize> {
    let start = offset + text.len() - text.trim_start().len();
    start..start + text.trim().len()
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
    fn an_error_inside_an_inline_table_is_shown_at_its_value() {
        let sensors = "mode = \"sensors\"\nwatermark_alignment = { group = \"a\", max_drift_ms = -1 } # held back";
        let negative = error("mode = \"sequence\"", sensors);
        assert!(negative.starts_with("TOML parse error at line 7, column 53\n"), "{negative}");
        assert!(negative.contains(&format!("  | {}^^\n", " ".repeat(52))), "{negative}");
        let string = error("mode = \"sequence\"", &sensors.replace("-1", "\"1 s\""));
        assert!(string.starts_with("TOML parse error at line 7, column 53\n"), "{string}");
        let key = error("mode = \"sequence\"", &sensors.replace("max_drift_ms", "max_drift"));
        assert!(key.starts_with("TOML parse error at line 7, column 38\n"), "{key}");
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
