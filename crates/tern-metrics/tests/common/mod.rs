//! Test helpers: a strict Prometheus text-format 0.0.4 checker and a raw HTTP/1.1 client.

#![allow(dead_code)] // each test binary uses a different subset

use std::collections::{BTreeMap, HashMap};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

/// A sample's identity: metric name and sorted label pairs.
pub type SeriesKey = (String, Vec<(String, String)>);

/// Parses `text` as Prometheus text exposition format 0.0.4, failing on anything a strict
/// scraper would reject: bad names, bad escapes, unparsable values, duplicate series, TYPE after
/// samples, samples of one family not contiguous, summary samples without quantile labels, and
/// histograms that break the format's rules ([`check_histograms`]).
pub fn parse_prometheus(text: &str) -> Result<BTreeMap<SeriesKey, f64>, String> {
    let samples = parse_samples(text)?;
    check_histograms(text, &samples)?;
    Ok(samples)
}

fn parse_samples(text: &str) -> Result<BTreeMap<SeriesKey, f64>, String> {
    let mut types: HashMap<String, String> = HashMap::new();
    let mut helps: HashMap<String, String> = HashMap::new();
    let mut finished_families: Vec<String> = Vec::new();
    let mut current_family: Option<String> = None;
    let mut samples = BTreeMap::new();
    if !text.is_empty() && !text.ends_with('\n') {
        return Err("output must end with a newline".into());
    }
    for (number, line) in text.lines().enumerate() {
        let err = |msg: &str| format!("line {}: {msg}: {line:?}", number + 1);
        if line.is_empty() {
            continue;
        }
        if let Some(rest) = line.strip_prefix("# ") {
            let (keyword, rest) = rest.split_once(' ').ok_or_else(|| err("bad comment"))?;
            match keyword {
                "HELP" => {
                    let (name, help) = rest.split_once(' ').unwrap_or((rest, ""));
                    check_metric_name(name).map_err(|e| err(&e))?;
                    unescape(help, false).map_err(|e| err(&e))?;
                    if helps.insert(name.into(), help.into()).is_some() {
                        return Err(err("second HELP for family"));
                    }
                }
                "TYPE" => {
                    let (name, kind) = rest
                        .split_once(' ')
                        .ok_or_else(|| err("TYPE without type"))?;
                    check_metric_name(name).map_err(|e| err(&e))?;
                    if !["counter", "gauge", "summary", "histogram", "untyped"].contains(&kind) {
                        return Err(err("unknown type"));
                    }
                    if types.insert(name.into(), kind.into()).is_some() {
                        return Err(err("second TYPE for family"));
                    }
                    if finished_families.contains(&name.to_string())
                        || current_family.as_deref() == Some(name)
                    {
                        return Err(err("TYPE after samples of the family"));
                    }
                }
                _ => {}
            }
            continue;
        }
        let (name, labels, value) = parse_sample(line).map_err(|e| err(&e))?;
        let family = family_of(&name, &types);
        if current_family.as_deref() != Some(family.as_str()) {
            if finished_families.contains(&family) {
                return Err(err("samples of a family are not contiguous"));
            }
            if let Some(previous) = current_family.replace(family.clone()) {
                finished_families.push(previous);
            }
        }
        if types.get(&family).map(String::as_str) == Some("summary")
            && name == family
            && !labels.iter().any(|(k, _)| k == "quantile")
        {
            return Err(err("summary sample without quantile label"));
        }
        let mut sorted = labels.clone();
        sorted.sort();
        for pair in sorted.windows(2) {
            if pair[0].0 == pair[1].0 {
                return Err(err("duplicate label name"));
            }
        }
        if samples.insert((name, sorted), value).is_some() {
            return Err(err("duplicate series"));
        }
    }
    Ok(samples)
}

/// The exposition format's rules for a histogram `x`, per series (its labels but `le`): only
/// `x_bucket`, `x_sum` and `x_count` samples; every `x_bucket` has an `le` that parses as a float,
/// in increasing order, with counts that never decrease, the last one `le="+Inf"` and equal to
/// `x_count`; and a `x_sum`.
fn check_histograms(text: &str, samples: &BTreeMap<SeriesKey, f64>) -> Result<(), String> {
    let histograms: Vec<&str> = text
        .lines()
        .filter_map(|line| line.strip_prefix("# TYPE ")?.strip_suffix(" histogram"))
        .collect();
    // Bucket lines in the order they were written, per histogram series.
    let mut buckets: BTreeMap<SeriesKey, Vec<(f64, f64)>> = BTreeMap::new();
    for line in text
        .lines()
        .filter(|line| !line.starts_with('#') && !line.is_empty())
    {
        let (name, labels, value) = parse_sample(line)?;
        let Some((family, suffix)) = histograms.iter().find_map(|h| {
            let suffix = name.strip_prefix(*h)?;
            ["", "_bucket", "_sum", "_count"]
                .contains(&suffix)
                .then_some((*h, suffix))
        }) else {
            continue;
        };
        let err = |msg: &str| format!("histogram {family}: {msg}: {line:?}");
        match suffix {
            "_bucket" => {}
            "" => return Err(err("sample that is not _bucket, _sum or _count")),
            _ => {
                if labels.iter().any(|(k, _)| k == "le") {
                    return Err(err("le on a _sum or _count sample"));
                }
                continue;
            }
        }
        let le = labels
            .iter()
            .find(|(k, _)| k == "le")
            .ok_or_else(|| err("bucket without le"))?;
        let bound = match le.1.as_str() {
            "+Inf" => f64::INFINITY,
            v => v.parse::<f64>().map_err(|_| err("le is not a float"))?,
        };
        let mut series: Vec<(String, String)> =
            labels.into_iter().filter(|(k, _)| k != "le").collect();
        series.sort();
        let series_buckets = buckets.entry((family.to_string(), series)).or_default();
        if let Some(&(previous_bound, previous_count)) = series_buckets.last() {
            if bound <= previous_bound {
                return Err(err("bucket bounds not increasing"));
            }
            if value < previous_count {
                return Err(err("bucket counts not cumulative"));
            }
        }
        series_buckets.push((bound, value));
    }
    for ((family, labels), series_buckets) in &buckets {
        let err = |msg: &str| format!("histogram {family}{labels:?}: {msg}");
        let &(last_bound, last_count) = series_buckets.last().expect("one bucket at least");
        if last_bound != f64::INFINITY {
            return Err(err("no le=\"+Inf\" bucket last"));
        }
        let count = samples.get(&(format!("{family}_count"), labels.clone()));
        if count != Some(&last_count) {
            return Err(err(&format!(
                "+Inf bucket {last_count} but _count {count:?}"
            )));
        }
        if !samples.contains_key(&(format!("{family}_sum"), labels.clone())) {
            return Err(err("no _sum"));
        }
    }
    for (name, labels) in samples.keys() {
        let counted_family = histograms
            .iter()
            .find(|h| name.strip_suffix("_count") == Some(**h));
        if let Some(family) = counted_family {
            if !buckets.contains_key(&(family.to_string(), labels.clone())) {
                return Err(format!(
                    "histogram {family}{labels:?}: _count without buckets"
                ));
            }
        }
    }
    Ok(())
}

fn family_of(name: &str, types: &HashMap<String, String>) -> String {
    for suffix in ["_sum", "_count", "_bucket"] {
        if let Some(base) = name.strip_suffix(suffix) {
            if matches!(
                types.get(base).map(String::as_str),
                Some("summary" | "histogram")
            ) {
                return base.to_string();
            }
        }
    }
    name.to_string()
}

fn check_metric_name(name: &str) -> Result<(), String> {
    let valid = !name.is_empty()
        && name.char_indices().all(|(i, c)| {
            c.is_ascii_alphabetic() || c == '_' || c == ':' || (i > 0 && c.is_ascii_digit())
        });
    if valid {
        Ok(())
    } else {
        Err(format!("invalid metric name {name:?}"))
    }
}

fn unescape(text: &str, allow_quote: bool) -> Result<String, String> {
    let mut out = String::new();
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => match chars.next() {
                Some('\\') => out.push('\\'),
                Some('n') => out.push('\n'),
                Some('"') if allow_quote => out.push('"'),
                other => return Err(format!("bad escape \\{other:?}")),
            },
            '\n' => return Err("raw newline".into()),
            c => out.push(c),
        }
    }
    Ok(out)
}

type Sample = (String, Vec<(String, String)>, f64);

fn parse_sample(line: &str) -> Result<Sample, String> {
    let name_end = line.find(['{', ' ']).ok_or("sample without value")?;
    let name = &line[..name_end];
    check_metric_name(name)?;
    let mut rest = &line[name_end..];
    let mut labels = Vec::new();
    if let Some(mut cursor) = rest.strip_prefix('{') {
        loop {
            if let Some(after) = cursor.strip_prefix('}') {
                rest = after;
                break;
            }
            let eq = cursor.find('=').ok_or("label without =")?;
            let label_name = &cursor[..eq];
            let label_ok = !label_name.is_empty()
                && label_name.char_indices().all(|(i, c)| {
                    c.is_ascii_alphabetic() || c == '_' || (i > 0 && c.is_ascii_digit())
                });
            if !label_ok {
                return Err(format!("invalid label name {label_name:?}"));
            }
            let quoted = cursor[eq + 1..]
                .strip_prefix('"')
                .ok_or("label value not quoted")?;
            let mut end = None;
            let mut escaped = false;
            for (i, c) in quoted.char_indices() {
                match (escaped, c) {
                    (true, _) => escaped = false,
                    (false, '\\') => escaped = true,
                    (false, '"') => {
                        end = Some(i);
                        break;
                    }
                    _ => {}
                }
            }
            let end = end.ok_or("unterminated label value")?;
            labels.push((label_name.to_string(), unescape(&quoted[..end], true)?));
            cursor = &quoted[end + 1..];
            if let Some(after) = cursor.strip_prefix(',') {
                cursor = after;
            } else if !cursor.starts_with('}') {
                return Err("expected , or } after label".into());
            }
        }
    }
    let rest = rest.strip_prefix(' ').ok_or("missing space before value")?;
    let mut fields = rest.split(' ');
    let value_text = fields.next().ok_or("missing value")?;
    let value = match value_text {
        "NaN" => f64::NAN,
        "+Inf" => f64::INFINITY,
        "-Inf" => f64::NEG_INFINITY,
        v => v.parse::<f64>().map_err(|_| format!("bad value {v:?}"))?,
    };
    if let Some(timestamp) = fields.next() {
        timestamp.parse::<i64>().map_err(|_| "bad timestamp")?;
    }
    if fields.next().is_some() {
        return Err("trailing fields".into());
    }
    Ok((name.to_string(), labels, value))
}

/// The value of series `name{labels}` in parsed samples.
pub fn sample(
    samples: &BTreeMap<SeriesKey, f64>,
    name: &str,
    labels: &[(&str, &str)],
) -> Option<f64> {
    let mut key: Vec<(String, String)> = labels
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    key.sort();
    samples.get(&(name.to_string(), key)).copied()
}

/// A parsed HTTP response.
pub struct HttpResponse {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: String,
}

impl HttpResponse {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// Sends `request` (raw bytes) over a new TCP connection and reads the response until the
/// server closes it (requests should say `Connection: close`).
pub fn http_raw(addr: SocketAddr, request: &[u8]) -> std::io::Result<HttpResponse> {
    let mut stream = TcpStream::connect(addr)?;
    stream.set_read_timeout(Some(Duration::from_secs(5)))?;
    stream.write_all(request)?;
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw)?;
    let text = String::from_utf8(raw).map_err(|e| std::io::Error::other(e.to_string()))?;
    let (head, body) = text
        .split_once("\r\n\r\n")
        .ok_or_else(|| std::io::Error::other(format!("no header end in {text:?}")))?;
    let mut lines = head.split("\r\n");
    let status_line = lines.next().unwrap_or_default();
    let status = status_line
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| std::io::Error::other(format!("bad status line {status_line:?}")))?;
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .collect();
    Ok(HttpResponse {
        status,
        headers,
        body: body.to_string(),
    })
}

/// `method path` with `Connection: close`.
pub fn http(addr: SocketAddr, method: &str, path: &str) -> HttpResponse {
    let request =
        format!("{method} {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n");
    let response = http_raw(addr, request.as_bytes()).expect("HTTP exchange");
    if let (Some(length), false) = (response.header("content-length"), method == "HEAD") {
        assert_eq!(
            length.parse::<usize>().ok(),
            Some(response.body.len()),
            "content-length mismatch"
        );
    }
    response
}
