//! The admin endpoint's index at `/`: what it serves, one line each, as HTML for a browser or
//! plain text for a client that asks for `text/plain` (e.g. `curl -H 'Accept: text/plain'`).
//! Routes are fixed when the server starts, so both renderings are made once then.

use std::fmt::Write as _;

/// One line of the index.
struct Endpoint {
    /// As shown, e.g. `/campaigns` or `/campaigns/*` for a prefix route.
    path: String,
    /// Whether `path` is a page to link to (a prefix route is not).
    linked: bool,
    description: String,
}

/// The index, rendered both ways.
pub(super) struct IndexPage {
    pub(super) html: String,
    pub(super) text: String,
}

impl IndexPage {
    /// The built-in endpoints, then the service's routes and prefix routes (path and description), each
    /// sorted by path.
    pub(super) fn new(
        mut routes: Vec<(String, String)>,
        mut prefixes: Vec<(String, String)>,
        has_stats_extra: bool,
    ) -> Self {
        let stats = if has_stats_extra {
            "every metric as JSON (histograms with count, sum, min, max, mean and p50 to \
             p99.99), and the service's own figures under \"service\""
        } else {
            "every metric as JSON (histograms with count, sum, min, max, mean and p50 to p99.99)"
        };
        let mut endpoints = vec![
            builtin(
                "/metrics",
                "every metric in Prometheus' text format (histograms with cumulative buckets); \
                 ?per_thread=1 adds a series per named thread, ?per_thread=0 leaves them out",
            ),
            builtin("/stats", stats),
            builtin(
                "/healthz",
                "\"ok\", or 503 \"draining\" once the service has begun shutting down",
            ),
            builtin(
                "/dashboard",
                "a live page of requests per second, latency percentiles and connections per service \
                 (and what the cache holds, each campaign's spend against its plan), read from /metrics",
            ),
        ];
        routes.sort_unstable();
        endpoints.extend(routes.into_iter().map(|(path, description)| Endpoint {
            path,
            linked: true,
            description,
        }));
        prefixes.sort_unstable();
        endpoints.extend(prefixes.into_iter().map(|(prefix, description)| Endpoint {
            path: format!("{prefix}*"),
            linked: false,
            description: format!("{description} (404 if it knows no such thing)"),
        }));
        Self {
            html: render_html(&endpoints),
            text: render_text(&endpoints),
        }
    }
}

fn builtin(path: &str, description: &str) -> Endpoint {
    Endpoint {
        path: path.to_owned(),
        linked: true,
        description: description.to_owned(),
    }
}

// Writing to a String cannot fail, so the fmt::Results below are ignored.

fn render_html(endpoints: &[Endpoint]) -> String {
    let mut html = String::from(
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head><meta charset=\"utf-8\">\
         <link rel=\"icon\" href=\"data:,\"><title>tern admin</title></head>\n<body>\n\
         <h1>tern admin</h1>\n<ul>\n",
    );
    for endpoint in endpoints {
        let path = escape_html(&endpoint.path);
        let description = escape_html(&endpoint.description);
        if endpoint.linked {
            // Relative, so the links still work behind a proxy that serves this page under a
            // path of its own.
            let href = escape_html(endpoint.path.trim_start_matches('/'));
            let _ = writeln!(
                html,
                "<li><a href=\"{href}\"><code>{path}</code></a>: {description}</li>"
            );
        } else {
            let _ = writeln!(html, "<li><code>{path}</code>: {description}</li>");
        }
    }
    html.push_str("</ul>\n</body>\n</html>\n");
    html
}

fn render_text(endpoints: &[Endpoint]) -> String {
    let width = endpoints.iter().map(|e| e.path.len()).max().unwrap_or(0);
    let mut text = String::new();
    for endpoint in endpoints {
        let _ = writeln!(text, "{:width$}  {}", endpoint.path, endpoint.description);
    }
    text
}

fn escape_html(text: &str) -> String {
    let mut escaped = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => escaped.push_str("&amp;"),
            '<' => escaped.push_str("&lt;"),
            '>' => escaped.push_str("&gt;"),
            '"' => escaped.push_str("&quot;"),
            c => escaped.push(c),
        }
    }
    escaped
}

/// Whether an `Accept` header ranks `text/plain` above `text/html`. Each type takes the quality
/// (`q`) of the most specific range that matches it (`text/plain`, then `text/*`, then `*/*`), as
/// RFC 9110 says; HTML wins ties and a missing header.
pub(super) fn prefers_plain_text(accept: Option<&str>) -> bool {
    accept.is_some_and(|accept| quality(accept, "text/plain") > quality(accept, "text/html"))
}

fn quality(accept: &str, media_type: &str) -> f32 {
    let (main_type, _) = media_type
        .split_once('/')
        .expect("called with full media types");
    let mut best: Option<(u8, f32)> = None;
    for range in accept.split(',') {
        let mut parts = range.split(';');
        let range_type = parts.next().unwrap_or_default().trim();
        let specificity = match range_type.split_once('/') {
            Some(("*", "*")) => 0,
            Some((main, "*")) if main.eq_ignore_ascii_case(main_type) => 1,
            _ if range_type.eq_ignore_ascii_case(media_type) => 2,
            _ => continue,
        };
        let q = parts
            .filter_map(|param| param.trim().strip_prefix("q="))
            .find_map(|q| q.parse().ok())
            .unwrap_or(1.0);
        if best.is_none_or(|(most_specific, _)| specificity > most_specific) {
            best = Some((specificity, q));
        }
    }
    best.map_or(0.0, |(_, q)| q)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn html_wins_unless_plain_text_ranks_higher() {
        for (accept, plain) in [
            (None, false),
            (Some("*/*"), false),
            (Some("text/html,application/xhtml+xml,*/*;q=0.8"), false),
            (Some("text/plain"), true),
            (Some("TEXT/PLAIN; charset=utf-8"), true),
            (Some("text/html;q=0.5, text/plain"), true),
            (Some("text/plain;q=0.5, text/html"), false),
            (Some("text/plain, text/*;q=0"), true),
            (Some("application/json"), false),
        ] {
            assert_eq!(prefers_plain_text(accept), plain, "{accept:?}");
        }
    }

    #[test]
    fn paths_are_escaped_and_prefix_routes_not_linked() {
        let page = IndexPage::new(
            vec![("/a<b>".into(), "a".into())],
            vec![("/items/".into(), "the item after /items/".into())],
            false,
        );
        assert!(page
            .html
            .contains("<a href=\"a&lt;b&gt;\"><code>/a&lt;b&gt;</code></a>"));
        assert!(page.html.contains("<li><code>/items/*</code>: "));
        let line = page
            .text
            .lines()
            .find(|l| l.starts_with("/items/*"))
            .unwrap();
        assert_eq!(
            line.split_whitespace().collect::<Vec<_>>().join(" "),
            "/items/* the item after /items/ (404 if it knows no such thing)"
        );
    }
}
