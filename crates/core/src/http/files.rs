//! Static routes (DESIGN §24): an actor's committed `/public` files served by the host, without
//! waking the actor. `tower-http`'s `ServeDir` does the serving, in its one-file form
//! `ServeFile` once the file is found (content types, `Range`, `If-Modified-Since`,
//! `index.html`, no listings); this module decides first what may be
//! served (no dot-files, nothing outside the folder, through `..`, an encoded dot or a
//! symlink) and adds what `ServeDir` lacks: an `ETag` and `If-None-Match`.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use axum::body::Body;
use http::{HeaderValue, Request, Response, StatusCode, header};
use percent_encoding::percent_decode_str;
use tower::ServiceExt;
use tower_http::services::{ServeDir, ServeFile};

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
    // A few `stat`s on this thread, one of the public address's and not the world's: cheaper
    // than a hop to the blocking pool and back, which cost more than the file's serving.
    let Some(found) = find(&root, &rest) else {
        return not_found(&path);
    };
    let etag = etag(&found.meta);
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
    // The file found is handed to `ServeFile` (`ServeDir` for one file): `ServeDir` would look
    // again whether the path is a folder, one more hop to the blocking pool. A folder's path
    // without its `/` still goes to `ServeDir`, which redirects it.
    let served = match found.folder && !rest.ends_with('/') {
        true => {
            ServeDir::new(&root)
                .append_index_html_on_directories(true)
                .oneshot(request)
                .await
        }
        false => ServeFile::new(&found.path).oneshot(request).await,
    };
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

/// A file a static route may serve.
struct Found {
    /// The path `ServeDir` would open (a folder's `index.html`), its type guessed from it.
    path: PathBuf,
    meta: std::fs::Metadata,
    /// Whether the request named a folder.
    folder: bool,
}

/// The file `rest` names under `root`, as `ServeDir` would find it (a folder's `index.html`),
/// if it may be served: no segment hidden (a dot-file, or the host's temporaries), and its
/// real path, symlinks followed, inside `root`'s. Without a symlink below `root` the file is
/// inside it, so only a path through one is resolved (`canonicalize` reads every link of the
/// whole path, `root`'s ancestors too: twice the `stat`s of serving the file).
fn find(root: &Path, rest: &str) -> Option<Found> {
    let decoded = percent_decode_str(rest).decode_utf8().ok()?;
    if decoded.contains('\0') {
        return None;
    }
    let mut path = root.to_path_buf();
    let mut linked = false;
    for segment in decoded.split('/').filter(|s| !s.is_empty()) {
        if segment.starts_with('.') || segment.contains('\\') {
            return None;
        }
        path.push(segment);
        linked |= path.symlink_metadata().ok()?.is_symlink();
    }
    let mut meta = std::fs::metadata(&path).ok()?;
    let folder = meta.is_dir();
    if folder {
        path.push("index.html");
        linked |= path.symlink_metadata().ok()?.is_symlink();
        meta = std::fs::metadata(&path).ok()?;
    }
    if !meta.is_file() {
        return None;
    }
    if linked
        && !path
            .canonicalize()
            .ok()?
            .starts_with(root.canonicalize().ok()?)
    {
        return None;
    }
    Some(Found { path, meta, folder })
}

/// A validator of a file's content as committed: a commit replaces a file by a rename, so a
/// new content is a new inode (and usually a new size and time).
fn etag(m: &std::fs::Metadata) -> String {
    format!(
        "\"{:x}-{:x}-{:x}\"",
        m.ino(),
        m.size(),
        m.mtime_nsec() ^ (m.mtime() << 30)
    )
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
        // What is found is what is served: the file's content, through the inner link too.
        let served =
            |rest: &str| find(&root, rest).map(|f| std::fs::read_to_string(f.path).unwrap());
        assert_eq!(served("/"), Some("home".into()));
        assert_eq!(served("/docs/a%20b.txt"), Some("a".into()));
        assert_eq!(served("/inner"), Some("home".into()));
        assert!(find(&root, "/").unwrap().folder);
        for hidden in [
            "/.env",
            "/link",
            "/docs",
            "/missing",
            "/%2e%2e/outside",
            "/docs/%00",
        ] {
            assert!(find(&root, hidden).is_none(), "{hidden}");
        }
    }
}
