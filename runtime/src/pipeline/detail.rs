//! What an error answer says: its `detail`, without the request's echo, and
//! an HTML error page reduced to one operator line.

use crate::error::{Detail, bounded};

/// What an error's detail keeps of an HTML page's `<title>`.
const MAX_TITLE: usize = 120;

/// A structured detail without what the server echoed of the request: a
/// FastAPI/pydantic 422 lists `{type, loc, msg, input, ctx, url}` per field,
/// and `input` (like the values of `ctx`) quotes the rejected value,
/// Mandanten content. Those two keys are removed, in lists and objects at any
/// depth; everything else stays (a `HTTPException(423, detail={"code":
/// "finding_locked", "message": …})` keeps its code and message). The text
/// is bounded by the caller ([`detail_of`]).
pub(crate) fn operator_view(detail: serde_json::Value) -> serde_json::Value {
    use serde_json::Value;
    /// pydantic's echo of the request: the value itself and its context.
    const ECHOES: [&str; 2] = ["input", "ctx"];
    match detail {
        Value::Array(items) => Value::Array(items.into_iter().map(operator_view).collect()),
        Value::Object(fields) => Value::Object(
            fields
                .into_iter()
                .filter(|(k, _)| !ECHOES.contains(&k.as_str()))
                .map(|(k, v)| (k, operator_view(v)))
                .collect(),
        ),
        other => other,
    }
}

/// The `detail` of the platform's `{"detail": ...}` envelope, cut to `max`
/// bytes; an HTML page (a proxy's own 502, a panel's `error_docs`) becomes
/// one line for an operator ([`page_line`]); any other body is withheld
/// behind its content type, length and sha256 (a plain-text 500 may quote
/// Mandanten content). Only error answers are read for it.
pub(crate) fn detail_of(
    status: u16,
    content_type: Option<&str>,
    body: &[u8],
    max: usize,
) -> Option<Detail> {
    #[derive(serde::Deserialize)]
    struct Envelope {
        detail: serde_json::Value,
    }
    if body.is_empty() {
        return None;
    }
    if is_html(content_type, body) {
        return Some(Detail::Shown(bounded(
            &page_line(status, content_type, body),
            max,
        )));
    }
    let text = match serde_json::from_slice::<Envelope>(body) {
        Ok(Envelope {
            detail: serde_json::Value::String(s),
        }) => s,
        Ok(Envelope { detail }) => operator_view(detail).to_string(),
        Err(_) => {
            let kind = content_type.unwrap_or("no content type");
            return Some(Detail::withheld(kind, body, max));
        }
    };
    Some(Detail::Shown(bounded(&text, max)))
}

#[cfg(test)]
mod tests {
    use super::{Detail, detail_of};
    use serde_json::{Value, json};

    /// The text of a detail Display shows.
    pub(super) fn shown_text(detail: Option<Detail>) -> String {
        match detail {
            Some(Detail::Shown(text)) => text,
            other => panic!("not a shown detail: {other:?}"),
        }
    }

    fn shown(body: Value, max: usize) -> Value {
        let text = shown_text(detail_of(
            422,
            Some("application/json"),
            body.to_string().as_bytes(),
            max,
        ));
        serde_json::from_str(&text).unwrap_or(Value::String(text))
    }

    #[test]
    fn a_structured_detail_keeps_its_code_and_message() {
        let body = json!({"detail": {"code": "finding_locked", "message": "Befund ist gesperrt", "retry": false}});
        assert_eq!(
            shown(body, 4096),
            json!({"code": "finding_locked", "message": "Befund ist gesperrt", "retry": false})
        );
    }

    #[test]
    fn pydantic_input_and_ctx_are_removed_at_any_depth_the_rest_stays() {
        let body = json!({"detail": [{
            "type": "string_too_long",
            "loc": ["body", "query_text"],
            "msg": "String should have at most 200 characters",
            "input": "Mandantengeheimnis",
            "ctx": {"max_length": 200},
            "url": "https://errors.pydantic.dev/2.9/v/string_too_long",
            "nested": {"input": "Mandantengeheimnis", "kept": 1},
        }]});
        assert_eq!(
            shown(body, 4096),
            json!([{
                "type": "string_too_long",
                "loc": ["body", "query_text"],
                "msg": "String should have at most 200 characters",
                "url": "https://errors.pydantic.dev/2.9/v/string_too_long",
                "nested": {"kept": 1},
            }])
        );
    }

    #[test]
    fn any_other_body_is_withheld_behind_its_type_length_and_sha256() {
        let body = b"boom MANDANT-GEHEIM-4711";
        for (content_type, kind) in [
            (Some("text/plain"), "text/plain"),
            (None, "no content type"),
            (Some("application/json"), "application/json"),
        ] {
            let Some(Detail::Withheld { text, summary }) = detail_of(500, content_type, body, 16)
            else {
                panic!("not withheld");
            };
            assert!(
                text.starts_with("boom") && text.ends_with("[cut]"),
                "{text}"
            );
            assert_eq!(
                summary,
                format!(
                    "not the platform's error shape: {kind}, 24 bytes, sha256 {}",
                    crate::digest::sha256_hex(body)
                )
            );
        }
        // JSON, but not the platform's envelope: withheld too.
        let other = br#"{"error": "MANDANT-GEHEIM-4711"}"#;
        assert!(matches!(
            detail_of(502, Some("application/json"), other, 1024),
            Some(Detail::Withheld { .. })
        ));
    }

    #[test]
    fn a_structured_detail_is_bounded() {
        let long = "x".repeat(10_000);
        let body = json!({"detail": {"code": "finding_locked", "message": long}});
        let text = shown_text(detail_of(
            423,
            Some("application/json"),
            body.to_string().as_bytes(),
            256,
        ));
        assert!(text.len() <= 256, "{}", text.len());
        assert!(text.starts_with(r#"{"code":"finding_locked""#), "{text}");
        assert!(text.ends_with("[cut]"), "{text}");
    }
}

/// Whether an error body is an HTML page: said so by its `Content-Type`, or
/// (a proxy that labels it `text/plain` or not at all) by how it starts.
fn is_html(content_type: Option<&str>, body: &[u8]) -> bool {
    let declared = content_type.is_some_and(|t| {
        let t = t.trim_start().as_bytes();
        t.len() >= 9
            && (t[..9].eq_ignore_ascii_case(b"text/html")
                || starts_with_ci(t, b"application/xhtml"))
    });
    let start = body
        .iter()
        .position(|b| !b.is_ascii_whitespace())
        .map_or(&body[..0], |i| &body[i..]);
    declared || starts_with_ci(start, b"<!doctype html") || starts_with_ci(start, b"<html")
}

fn starts_with_ci(bytes: &[u8], prefix: &[u8]) -> bool {
    bytes.len() >= prefix.len() && bytes[..prefix.len()].eq_ignore_ascii_case(prefix)
}

/// One operator line for an HTML error page: its `<title>` (nginx: `502 Bad
/// Gateway`), else the status and content type, and the page's size (as
/// read, up to `limits.error_body`), never its text.
fn page_line(status: u16, content_type: Option<&str>, body: &[u8]) -> String {
    let kind = content_type.unwrap_or("no content type");
    match page_title(body) {
        Some(title) => format!(
            "an HTML error page, not the platform's answer: \"{title}\" ({kind}, {} bytes)",
            body.len()
        ),
        None => format!(
            "an HTML error page, not the platform's answer: status {status}, {kind}, {} bytes",
            body.len()
        ),
    }
}

/// The text of a page's first `<title>`, whitespace collapsed, control
/// characters dropped, bounded; `None` when it has none or it is empty.
fn page_title(body: &[u8]) -> Option<String> {
    let open =
        memchr::memmem::find_iter(body, b"<").find(|&i| starts_with_ci(&body[i..], b"<title"))?;
    let start = open + memchr::memchr(b'>', &body[open..])? + 1;
    let len = memchr::memmem::find_iter(&body[start..], b"</")
        .find(|&i| starts_with_ci(&body[start + i..], b"</title"))
        .unwrap_or(body.len() - start);
    let text = String::from_utf8_lossy(&body[start..start + len]);
    let title = text
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .replace(|c: char| c.is_control() || c == '"', "");
    (!title.is_empty()).then(|| bounded(&title, MAX_TITLE))
}

#[cfg(test)]
mod page_tests {
    use super::tests::shown_text;
    use super::*;

    /// nginx 1.22's own 502 page, as it sends it.
    const NGINX_502: &str = "<html>\r\n<head><title>502 Bad Gateway</title></head>\r\n<body>\r\n<center><h1>502 Bad Gateway</h1></center>\r\n<hr><center>nginx/1.22.1</center>\r\n</body>\r\n</html>\r\n";

    #[test]
    fn a_proxy_page_becomes_one_line_with_its_title() {
        let line = shown_text(detail_of(
            502,
            Some("text/html"),
            NGINX_502.as_bytes(),
            1024,
        ));
        assert_eq!(
            line,
            format!(
                "an HTML error page, not the platform's answer: \"502 Bad Gateway\" (text/html, {} bytes)",
                NGINX_502.len()
            )
        );
        assert!(!line.contains('<') && !line.contains('\n'));
    }

    #[test]
    fn a_page_without_a_title_or_mislabelled_is_still_one_line() {
        let page = b"  <!DOCTYPE html><html><body><h1>Service Unavailable</h1>\n<p>Plesk</p></body></html>";
        let line = shown_text(detail_of(503, Some("text/plain"), page, 1024));
        assert_eq!(
            line,
            format!(
                "an HTML error page, not the platform's answer: status 503, text/plain, {} bytes",
                page.len()
            )
        );
        let titled = b"<HTML><HEAD><TITLE>\n  Gateway\r\n Timeout </TITLE>";
        assert!(
            shown_text(detail_of(504, None, titled, 1024))
                .contains("\"Gateway Timeout\" (no content type")
        );
        assert_eq!(
            shown_text(detail_of(
                500,
                Some("text/html; charset=utf-8"),
                b"{\"detail\":\"x\"}",
                1024
            )),
            "an HTML error page, not the platform's answer: status 500, text/html; charset=utf-8, 14 bytes",
            "labelled HTML is not parsed as anything else"
        );
    }
}
