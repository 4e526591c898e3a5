//! Link rewriting of HTML a pod or Service answers through the API server's proxy, as upstream's
//! proxy transport does (`k8s.io/apimachinery/pkg/util/proxy/transport.go`): an absolute path in
//! a link attribute (`<a href="/x">`) would leave the proxy, so it gets the proxy's path in front
//! (`/api/v1/namespaces/ns/pods/web/proxy/x`). Links to other hosts and relative links stay.
//!
//! Written here rather than with an HTML rewriting crate (lol_html and its CSS selector
//! machinery): only the attribute values of upstream's list of tags change, every other byte is
//! passed as it came, and a scanner of tags and quoted attributes is all that takes.

/// Upstream's tags and the attributes of each that hold URLs (`atomsToAttrs`).
const LINK_ATTRIBUTES: &[(&str, &[&str])] = &[
    ("a", &["href"]),
    ("applet", &["codebase"]),
    ("area", &["href"]),
    ("audio", &["src"]),
    ("base", &["href"]),
    ("blockquote", &["cite"]),
    ("body", &["background"]),
    ("button", &["formaction"]),
    ("command", &["icon"]),
    ("del", &["cite"]),
    ("embed", &["src"]),
    ("form", &["action"]),
    ("frame", &["longdesc", "src"]),
    ("head", &["profile"]),
    ("html", &["manifest"]),
    ("iframe", &["longdesc", "src"]),
    ("img", &["longdesc", "src", "usemap"]),
    ("input", &["src", "usemap", "formaction"]),
    ("ins", &["cite"]),
    ("link", &["href"]),
    ("object", &["classid", "codebase", "data", "usemap"]),
    ("q", &["cite"]),
    ("script", &["src"]),
    ("source", &["src"]),
    ("video", &["poster", "src"]),
];

/// Upstream's `rewriteURL` with no scheme or host of its own: a path-absolute URL (no host, or
/// the backend's `host`) gets `prefix` in front, unless it already has it; a trailing slash
/// stays.
fn rewrite_url(url: &str, prefix: &str, host: &str) -> String {
    let (url_host, rest) = match url.split_once("://") {
        Some((_, after)) => match after.find('/') {
            Some(i) => (&after[..i], &after[i..]),
            None => (after, ""),
        },
        None if url.starts_with("//") => return url.to_string(),
        None => ("", url),
    };
    if (!url_host.is_empty() && url_host != host) || !rest.starts_with('/') {
        return url.to_string();
    }
    let prefix = prefix.trim_end_matches('/');
    if rest.starts_with(prefix) {
        return rest.to_string();
    }
    format!("{prefix}{rest}")
}

/// `html` with its links rewritten under `prefix` (`host` is the backend's `ip:port`).
pub(crate) fn rewrite(html: &[u8], prefix: &str, host: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(html.len() + 64);
    let mut i = 0;
    while i < html.len() {
        if html[i] != b'<' {
            out.push(html[i]);
            i += 1;
            continue;
        }
        // A tag: its name, then attributes until '>'.
        let start = i;
        let mut j = i + 1;
        while j < html.len() && html[j].is_ascii_alphanumeric() {
            j += 1;
        }
        let name = String::from_utf8_lossy(&html[i + 1..j]).to_ascii_lowercase();
        let Some((_, attrs)) = LINK_ATTRIBUTES.iter().find(|(t, _)| *t == name) else {
            out.extend_from_slice(&html[start..j]);
            i = j;
            continue;
        };
        out.extend_from_slice(&html[start..j]);
        i = j;
        while i < html.len() && html[i] != b'>' {
            // An attribute name.
            if !html[i].is_ascii_alphabetic() {
                out.push(html[i]);
                i += 1;
                continue;
            }
            let name_start = i;
            while i < html.len() && (html[i].is_ascii_alphanumeric() || html[i] == b'-') {
                i += 1;
            }
            let attr = String::from_utf8_lossy(&html[name_start..i]).to_ascii_lowercase();
            out.extend_from_slice(&html[name_start..i]);
            if i >= html.len() || html[i] != b'=' {
                continue;
            }
            out.push(b'=');
            i += 1;
            // Its value: quoted or bare.
            let quote = html.get(i).copied().filter(|q| *q == b'"' || *q == b'\'');
            let (value_start, value_end, next) = match quote {
                Some(q) => {
                    let end = html[i + 1..]
                        .iter()
                        .position(|b| *b == q)
                        .map_or(html.len(), |p| i + 1 + p);
                    (i + 1, end, (end + 1).min(html.len()))
                }
                None => {
                    let end = html[i..]
                        .iter()
                        .position(|b| b.is_ascii_whitespace() || *b == b'>')
                        .map_or(html.len(), |p| i + p);
                    (i, end, end)
                }
            };
            let value = &html[value_start..value_end];
            let new = if attrs.contains(&attr.as_str()) {
                rewrite_url(&String::from_utf8_lossy(value), prefix, host).into_bytes()
            } else {
                value.to_vec()
            };
            if let Some(q) = quote {
                out.push(q);
                out.extend_from_slice(&new);
                if value_end < html.len() {
                    out.push(q);
                }
            } else {
                out.extend_from_slice(&new);
            }
            i = next;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const PREFIX: &str = "/api/v1/namespaces/ns/pods/web:1080/proxy";

    fn rw(html: &str) -> String {
        String::from_utf8(rewrite(html.as_bytes(), PREFIX, "10.42.0.5:1080")).unwrap()
    }

    /// The conformance spec's page (agnhost porter), and the cases upstream leaves alone.
    #[test]
    fn path_absolute_links_get_the_proxy_path() {
        assert_eq!(
            rw(r#"<a href="/rewriteme">test</a>"#),
            format!(r#"<a href="{PREFIX}/rewriteme">test</a>"#)
        );
        assert_eq!(
            rw("<IMG class=x SRC='/a/b/' alt=\"/no\">"),
            format!("<IMG class=x SRC='{PREFIX}/a/b/' alt=\"/no\">")
        );
        assert_eq!(
            rw("<link href=/style.css>"),
            format!("<link href={PREFIX}/style.css>")
        );
        // Relative links, other hosts, other attributes and text stay as they are.
        for same in [
            r#"<a href="rel/x">"#,
            r#"<a href="https://example.com/x">"#,
            r#"<a href="//cdn.example.com/x">"#,
            r#"<p title="/x">/x</p>"#,
            "a < b and <br/>",
        ] {
            assert_eq!(rw(same), same);
        }
        // The backend's own host is rewritten as a path; one already under the proxy is kept.
        assert_eq!(
            rw(r#"<a href="http://10.42.0.5:1080/x">"#),
            format!(r#"<a href="{PREFIX}/x">"#)
        );
        assert_eq!(
            rw(&format!(r#"<a href="{PREFIX}/x">"#)),
            format!(r#"<a href="{PREFIX}/x">"#)
        );
    }
}
