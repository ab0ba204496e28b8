//! Static routes (DESIGN §24): an actor's committed `/public` files served by the host, without
//! waking the actor. `tower-http`'s `ServeDir` does the serving (content types, `Range`,
//! `If-Modified-Since`, `index.html`, no listings); this module decides first what may be
//! served (no dot-files, nothing outside the folder, through `..`, an encoded dot or a
//! symlink) and adds what `ServeDir` lacks: an `ETag` and `If-None-Match`.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use axum::body::Body;
use http::{HeaderValue, Request, Response, StatusCode, header};
use percent_encoding::percent_decode_str;
use tower::ServiceExt;
use tower_http::services::ServeDir;

use crate::message::ActorId;
use crate::world::World;
use crate::world::routes::stem;

/// Refuses a request path no route may see: one with a `.` or `..` segment, or an encoded
/// `/`, `\`, `.` or NUL, which could name another path than the one routed.
pub fn check_request_path(path: &str) -> Result<(), String> {
    let lower = path.to_ascii_lowercase();
    let encoded = ["%2f", "%5c", "%00", "%2e"]
        .iter()
        .any(|e| lower.contains(e));
    let dotted = path.split('/').any(|segment| matches!(segment, "." | ".."));
    match encoded || dotted || path.contains('\\') {
        true => Err(format!(
            "the path {path} has a . or .. segment or an encoded /, \\, . or NUL; ask for the \
             path itself"
        )),
        false => Ok(()),
    }
}

/// Serves `request` from folder `dir` (under `actor`'s `/public`) of the static route `at`.
pub async fn serve<B: Send + 'static>(
    world: &World,
    actor: &ActorId,
    dir: &str,
    at: &str,
    request: Request<B>,
) -> Response<Body> {
    let path = request.uri().path().to_string();
    let rest = match stem(at) {
        "/" => path.as_str(),
        stem => &path[stem.len()..],
    };
    let rest = if rest.is_empty() { "/" } else { rest }.to_string();
    let root = world
        .public_dir(actor)
        .join(dir.trim_start_matches("/public").trim_start_matches('/'));
    let found = {
        let (root, rest) = (root.clone(), rest.clone());
        tokio::task::spawn_blocking(move || find(&root, &rest)).await
    };
    let etag = match found {
        Ok(Some(file)) => etag(&file),
        _ => return not_found(&path),
    };
    let matches = request
        .headers()
        .get(header::IF_NONE_MATCH)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|tags| {
            tags.split(',')
                .map(|t| t.trim().trim_start_matches("W/"))
                .any(|t| t == etag || t == "*")
        });
    if matches {
        let mut response = Response::new(Body::empty());
        *response.status_mut() = StatusCode::NOT_MODIFIED;
        if let Ok(value) = HeaderValue::from_str(&etag) {
            response.headers_mut().insert(header::ETAG, value);
        }
        return response;
    }
    let (mut parts, body) = request.into_parts();
    let mut uri = rest.clone();
    if let Some(query) = parts.uri.query() {
        uri.push('?');
        uri.push_str(query);
    }
    let Ok(uri) = uri.parse() else {
        return not_found(&path);
    };
    parts.uri = uri;
    let request = Request::from_parts(parts, body);
    let served = ServeDir::new(&root)
        .append_index_html_on_directories(true)
        .oneshot(request)
        .await;
    let Ok(served) = served;
    let status = served.status();
    if status == StatusCode::NOT_FOUND {
        return not_found(&path);
    }
    let (mut parts, body) = served.into_parts();
    if status.is_redirection() {
        // `ServeDir` adds the / a folder's path lacks, from the path it saw: give back the
        // route's part.
        let location = parts
            .headers
            .get(header::LOCATION)
            .and_then(|l| l.to_str().ok());
        if let Some(location) = location {
            let full = format!("{}{location}", stem(at).trim_end_matches('/'));
            if let Ok(value) = HeaderValue::from_str(&full) {
                parts.headers.insert(header::LOCATION, value);
            }
        }
    }
    if status.is_success()
        && let Ok(value) = HeaderValue::from_str(&etag)
    {
        parts.headers.insert(header::ETAG, value);
        parts
            .headers
            .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    }
    Response::from_parts(parts, Body::new(body))
}

/// The file `rest` names under `root`, as `ServeDir` will find it (a folder's `index.html`),
/// if it may be served: no segment hidden (a dot-file, or the host's temporaries), and its
/// real path, symlinks followed, inside `root`'s.
fn find(root: &Path, rest: &str) -> Option<PathBuf> {
    let decoded = percent_decode_str(rest).decode_utf8().ok()?;
    if decoded.contains('\0') {
        return None;
    }
    let mut file = root.to_path_buf();
    for segment in decoded.split('/').filter(|s| !s.is_empty()) {
        if segment.starts_with('.') || segment.contains('\\') {
            return None;
        }
        file.push(segment);
    }
    let real_root = root.canonicalize().ok()?;
    let mut real = file.canonicalize().ok()?;
    if real.is_dir() {
        real = real.join("index.html").canonicalize().ok()?;
    }
    (real.starts_with(&real_root) && real.is_file()).then_some(real)
}

/// A validator of a file's content as committed: a commit replaces a file by a rename, so a
/// new content is a new inode (and usually a new size and time).
fn etag(file: &Path) -> String {
    match std::fs::metadata(file) {
        Ok(m) => format!(
            "\"{:x}-{:x}-{:x}\"",
            m.ino(),
            m.size(),
            m.mtime_nsec() ^ (m.mtime() << 30)
        ),
        Err(_) => "\"0\"".to_string(),
    }
}

fn not_found(path: &str) -> Response<Body> {
    super::plain(
        StatusCode::NOT_FOUND,
        &format!("nothing is served at {path}"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dotted_and_encoded_paths_are_refused() {
        for path in [
            "/a/../b",
            "/a/./b",
            "/..",
            "/a/%2e%2e/b",
            "/a%2Fb",
            "/a%5cb",
            "/a\\b",
            "/a%00",
        ] {
            assert!(check_request_path(path).is_err(), "{path}");
        }
        for path in ["/", "/a/b.css", "/a/.well-known", "/a%20b", "/a..b"] {
            assert!(check_request_path(path).is_ok(), "{path}");
        }
    }

    #[test]
    fn only_visible_files_inside_the_folder_are_found() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("site");
        std::fs::create_dir_all(root.join("docs")).unwrap();
        std::fs::write(root.join("index.html"), "home").unwrap();
        std::fs::write(root.join("docs/a b.txt"), "a").unwrap();
        std::fs::write(root.join(".env"), "secret").unwrap();
        std::fs::write(dir.path().join("outside"), "no").unwrap();
        let root = root.canonicalize().unwrap();
        std::os::unix::fs::symlink(dir.path().join("outside"), root.join("link")).unwrap();
        std::os::unix::fs::symlink(root.join("index.html"), root.join("inner")).unwrap();
        assert_eq!(find(&root, "/"), Some(root.join("index.html")));
        assert_eq!(
            find(&root, "/docs/a%20b.txt"),
            Some(root.join("docs/a b.txt"))
        );
        assert_eq!(find(&root, "/inner"), Some(root.join("index.html")));
        for hidden in [
            "/.env",
            "/link",
            "/docs",
            "/missing",
            "/%2e%2e/outside",
            "/docs/%00",
        ] {
            assert_eq!(find(&root, hidden), None, "{hidden}");
        }
    }
}
