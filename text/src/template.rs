//! Chat templates: the Jinja template of `tokenizer_config.json` (or
//! `chat_template.jinja`), rendered as `transformers`' `apply_chat_template`
//! renders it — blocks trimmed, Python's string and dict methods, its
//! `tojson`, `raise_exception` and `strftime_now`.

use std::path::Path;

use minijinja::value::{Kwargs, Value};
use minijinja::{Environment, ErrorKind};
use serde::Serialize;

use crate::error::{TextError, read, read_json};

/// One message of a conversation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct Message {
    /// `system`, `user` or `assistant`.
    pub role: String,
    /// The text.
    pub content: String,
}

impl Message {
    /// A message of `role`.
    pub fn new(role: &str, content: &str) -> Self {
        Self {
            role: role.to_owned(),
            content: content.to_owned(),
        }
    }
}

/// A model's chat template with the special tokens it refers to.
#[derive(Debug, Clone)]
pub struct ChatTemplate {
    source: String,
    /// `bos_token`, `eos_token`, ... as the template sees them.
    tokens: Vec<(String, String)>,
}

const SPECIAL: [&str; 6] = [
    "bos_token",
    "eos_token",
    "unk_token",
    "pad_token",
    "sep_token",
    "cls_token",
];

impl ChatTemplate {
    /// A template from its source; `tokens` are the special tokens it may
    /// name (`("bos_token", "<s>")`).
    pub fn new(source: impl Into<String>, tokens: &[(&str, &str)]) -> Self {
        Self {
            source: source.into(),
            tokens: tokens
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
        }
    }

    /// The template of a model folder: `chat_template.jinja`, else
    /// `tokenizer_config.json`'s `chat_template` (a string, or a list of
    /// named templates of which `default` is taken); `None` without one.
    ///
    /// # Errors
    /// [`TextError::Config`] for malformed JSON or fields of the wrong type.
    pub fn from_folder(dir: &Path) -> Result<Option<Self>, TextError> {
        let config_path = dir.join("tokenizer_config.json");
        let config = if config_path.is_file() {
            Some(read_json(&config_path)?)
        } else {
            None
        };
        let bad = |message: String| TextError::Config {
            path: config_path.clone(),
            message,
        };
        let mut tokens = Vec::new();
        if let Some(c) = &config {
            for name in SPECIAL {
                match c.get(name) {
                    None | Some(serde_json::Value::Null) => {}
                    Some(serde_json::Value::String(s)) => tokens.push((name.to_owned(), s.clone())),
                    // An AddedToken object: {"content": "<s>", ...}.
                    Some(v) => match v.get("content").and_then(|c| c.as_str()) {
                        Some(s) => tokens.push((name.to_owned(), s.to_owned())),
                        None => return Err(bad(format!("`{name}` is not a token"))),
                    },
                }
            }
        }
        let jinja = dir.join("chat_template.jinja");
        let source = if jinja.is_file() {
            read(&jinja)?
        } else {
            match config.as_ref().and_then(|c| c.get("chat_template")) {
                None | Some(serde_json::Value::Null) => return Ok(None),
                Some(serde_json::Value::String(s)) => s.clone(),
                Some(serde_json::Value::Array(named)) => named
                    .iter()
                    .find(|t| t.get("name").and_then(|n| n.as_str()) == Some("default"))
                    .and_then(|t| t.get("template")?.as_str())
                    .ok_or_else(|| bad("`chat_template` has no template named `default`".into()))?
                    .to_owned(),
                Some(_) => return Err(bad("`chat_template` is not a string or a list".into())),
            }
        };
        Ok(Some(Self { source, tokens }))
    }

    /// The template's source.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// The prompt for `messages`; `add_generation_prompt` appends what
    /// opens the assistant's turn.
    ///
    /// # Errors
    /// [`TextError::Template`]: the template does not parse, fails to
    /// render, or calls `raise_exception` (its message is kept).
    pub fn render(
        &self,
        messages: &[Message],
        add_generation_prompt: bool,
    ) -> Result<String, TextError> {
        let fail = |e: minijinja::Error| TextError::Template {
            message: match e.detail() {
                Some(detail) if e.kind() == ErrorKind::InvalidOperation => detail.to_owned(),
                _ => format!("{e:#}"),
            },
        };
        let mut env = environment();
        env.add_template("chat", &self.source).map_err(fail)?;
        let mut ctx: std::collections::BTreeMap<&str, Value> = self
            .tokens
            .iter()
            .map(|(k, v)| (k.as_str(), Value::from(v.as_str())))
            .collect();
        ctx.insert("messages", Value::from_serialize(messages));
        ctx.insert("add_generation_prompt", Value::from(add_generation_prompt));
        env.get_template("chat")
            .and_then(|t| t.render(ctx))
            .map_err(fail)
    }
}

/// An environment configured as `transformers` configures Jinja for chat
/// templates.
fn environment() -> Environment<'static> {
    let mut env = Environment::new();
    env.set_trim_blocks(true);
    env.set_lstrip_blocks(true);
    env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
    env.add_function("raise_exception", |message: String| -> Result<Value, _> {
        Err(minijinja::Error::new(ErrorKind::InvalidOperation, message))
    });
    env.add_function("strftime_now", |format: String| {
        strftime(&format, std::time::SystemTime::now())
    });
    env.add_filter("tojson", tojson);
    env
}

/// Python's `json.dumps(value, ensure_ascii=False, indent=indent)`, as
/// `transformers`' `tojson` filter: `", "` and `": "` between items
/// without an indent, no HTML escaping.
fn tojson(value: Value, kwargs: Kwargs) -> Result<String, minijinja::Error> {
    let indent: Option<usize> = kwargs.get("indent")?;
    kwargs.assert_all_used()?;
    let bad =
        |e: serde_json::Error| minijinja::Error::new(ErrorKind::InvalidOperation, e.to_string());
    let mut out = Vec::new();
    match indent {
        Some(n) => {
            let pad = vec![b' '; n];
            let f = serde_json::ser::PrettyFormatter::with_indent(&pad);
            value
                .serialize(&mut serde_json::Serializer::with_formatter(&mut out, f))
                .map_err(bad)?;
        }
        None => value
            .serialize(&mut serde_json::Serializer::with_formatter(
                &mut out,
                PythonFormatter,
            ))
            .map_err(bad)?,
    }
    String::from_utf8(out)
        .map_err(|e| minijinja::Error::new(ErrorKind::InvalidOperation, e.to_string()))
}

/// `json.dumps`'s default separators.
struct PythonFormatter;

impl serde_json::ser::Formatter for PythonFormatter {
    fn begin_array_value<W: ?Sized + std::io::Write>(
        &mut self,
        w: &mut W,
        first: bool,
    ) -> std::io::Result<()> {
        if first { Ok(()) } else { w.write_all(b", ") }
    }

    fn begin_object_key<W: ?Sized + std::io::Write>(
        &mut self,
        w: &mut W,
        first: bool,
    ) -> std::io::Result<()> {
        if first { Ok(()) } else { w.write_all(b", ") }
    }

    fn begin_object_value<W: ?Sized + std::io::Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        w.write_all(b": ")
    }
}

const MONTHS: [&str; 12] = [
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
];
const DAYS: [&str; 7] = [
    "Monday",
    "Tuesday",
    "Wednesday",
    "Thursday",
    "Friday",
    "Saturday",
    "Sunday",
];

/// `time.strftime(format)` in UTC for the directives chat templates use
/// (`%d %m %Y %y %B %b %A %a %H %M %S %j %%`); any other directive is an
/// error naming it.
fn strftime(format: &str, now: std::time::SystemTime) -> Result<String, minijinja::Error> {
    let secs = now
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs()) as i64;
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    let (year, month, day) = civil_from_days(days);
    let weekday = (days + 3).rem_euclid(7) as usize; // 1970-01-01 was a Thursday
    let yday = days - days_from_civil(year, 1, 1) + 1;
    let mut out = String::new();
    let mut chars = format.chars();
    while let Some(c) = chars.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        let d = chars.next().unwrap_or('%');
        let piece = match d {
            'd' => format!("{day:02}"),
            'm' => format!("{month:02}"),
            'Y' => year.to_string(),
            'y' => format!("{:02}", year.rem_euclid(100)),
            'B' => MONTHS[month as usize - 1].to_owned(),
            'b' => MONTHS[month as usize - 1][..3].to_owned(),
            'A' => DAYS[weekday].to_owned(),
            'a' => DAYS[weekday][..3].to_owned(),
            'H' => format!("{:02}", rem / 3600),
            'M' => format!("{:02}", rem / 60 % 60),
            'S' => format!("{:02}", rem % 60),
            'j' => format!("{yday:03}"),
            '%' => "%".to_owned(),
            other => {
                return Err(minijinja::Error::new(
                    ErrorKind::InvalidOperation,
                    format!("strftime_now: %{other} is not supported"),
                ));
            }
        };
        out.push_str(&piece);
    }
    Ok(out)
}

/// Year, month, day of a day count from 1970-01-01 (the proleptic
/// Gregorian calendar).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

/// The day count from 1970-01-01 of a date.
fn days_from_civil(y: i64, m: u32, d: u32) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y.rem_euclid(400);
    let m = i64::from(m);
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + i64::from(d) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, UNIX_EPOCH};

    #[test]
    fn strftime_matches_known_dates() {
        // 2024-02-29 13:05:09 UTC was a Thursday, day 60 of the year.
        let t = UNIX_EPOCH + Duration::from_secs(1_709_211_909);
        assert_eq!(
            strftime("%d %b %Y, %A %H:%M:%S %j %m %y %B %a %%", t).unwrap(),
            "29 Feb 2024, Thursday 13:05:09 060 02 24 February Thu %"
        );
        assert_eq!(strftime("%Y-%m-%d", UNIX_EPOCH).unwrap(), "1970-01-01");
        assert!(strftime("%Z", t).is_err());
    }

    #[test]
    fn raise_exception_is_a_template_error_with_its_message() {
        let t = ChatTemplate::new(
            "{% if messages[0].role != 'user' %}{{ raise_exception('Conversation must start with user') }}{% endif %}ok",
            &[],
        );
        assert_eq!(
            t.render(&[Message::new("user", "hi")], false).unwrap(),
            "ok"
        );
        let e = t
            .render(&[Message::new("system", "hi")], false)
            .unwrap_err();
        assert!(
            e.to_string().contains("Conversation must start with user"),
            "{e}"
        );
    }

    #[test]
    fn tojson_uses_python_separators_without_escaping() {
        let t = ChatTemplate::new(
            "{{ {'a': [1, 'x<y'], 'b': none} | tojson }}|{{ [1] | tojson(indent=2) }}",
            &[],
        );
        assert_eq!(
            t.render(&[], false).unwrap(),
            "{\"a\": [1, \"x<y\"], \"b\": null}|[\n  1\n]"
        );
    }
}
