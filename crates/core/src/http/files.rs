//! Static routes (DESIGN §24): an actor's committed `/public` files served by the host, without
//! waking the actor. This module decides what may be served (no dot-files, no listings, nothing
//! outside the folder, through `..`, an encoded dot or a symlink; a folder's `index.html`) and
//! reads it on the public address's own thread; `http-serve` answers the request from it:
//! `ETag` and `If-None-Match`, `Last-Modified` and `If-Modified-Since`, `Range`, `HEAD`.
//! A file up to [`READ_WHOLE`] is read at once and served from memory (a copy from the page
//! cache, cheaper than any hop to a file thread); a larger one is read a chunk at a time as the
//! client takes it (`ChunkedReadFile`).

use std::io::Read;
use std::ops::Range;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::time::{Duration, SystemTime};

use axum::body::Body;
use bytes::Bytes;
use futures_util::Stream;
use http::{HeaderMap, HeaderValue, Request, Response, StatusCode, header};
use http_serve::{BoxError, ChunkedReadFile, Entity};
use percent_encoding::percent_decode_str;

use crate::message::ActorId;
use crate::world::World;
use crate::world::routes::stem;

/// Files at most this large are read whole and served from memory; larger ones a chunk at a
/// time.
const READ_WHOLE: u64 = 256 << 10;

/// Refuses a request path no route may see: one with a `.` or `..` segment, or an encoded
/// `/`, `\`, `.` or NUL, which could name another path than the one routed.
pub fn check_request_path(path: &str) -> Result<(), String> {
    let encoded = path.as_bytes().windows(3).any(|w| {
        w[0] == b'%'
            && matches!(
                (w[1], w[2].to_ascii_lowercase()),
                (b'2', b'f') | (b'5', b'c') | (b'0', b'0') | (b'2', b'e')
            )
    });
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
    let path = request.uri().path();
    let rest = match stem(at) {
        "/" => path,
        stem => &path[stem.len()..],
    };
    let rest = if rest.is_empty() { "/" } else { rest };
    let root = world
        .public_dir(actor)
        .join(dir.trim_start_matches("/public").trim_start_matches('/'));
    // A few `stat`s and a read on this thread, one of the public address's and not the
    // world's: cheaper than hops to a file thread and back, which cost more than the serving.
    let Some(found) = find(&root, rest) else {
        return not_found(path);
    };
    if found.folder && !rest.ends_with('/') {
        // A folder's page is asked for with its `/`, so that its relative links resolve.
        let mut location = format!("{path}/");
        if let Some(query) = request.uri().query() {
            location.push('?');
            location.push_str(query);
        }
        let mut response = Response::new(Body::empty());
        *response.status_mut() = StatusCode::TEMPORARY_REDIRECT;
        if let Ok(value) = HeaderValue::from_str(&location) {
            response.headers_mut().insert(header::LOCATION, value);
        }
        return response;
    }
    let mut headers = HeaderMap::new();
    let kind = mime_guess::from_path(&found.path).first_raw();
    let kind = kind.unwrap_or("application/octet-stream");
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(kind));
    let Ok(mut file) = std::fs::File::open(&found.path) else {
        return not_found(path);
    };
    // The file opened, not the path found: a commit may have replaced it since.
    let Ok(meta) = file.metadata() else {
        return not_found(path);
    };
    let content = if meta.len() <= READ_WHOLE {
        let mut data = Vec::with_capacity(meta.len() as usize);
        if file.read_to_end(&mut data).is_err() || data.len() as u64 != meta.len() {
            return not_found(path);
        }
        Content::Whole(Bytes::from(data))
    } else {
        match ChunkedReadFile::new_with_metadata(file, &meta, HeaderMap::new()) {
            Ok(chunked) => Content::Chunked(chunked),
            Err(_) => return not_found(path),
        }
    };
    let committed = Committed {
        content,
        etag: HeaderValue::from_str(&etag(&meta)).ok(),
        // To the second, as `Last-Modified` and `If-Modified-Since` say it.
        modified: (meta.mtime() >= 0)
            .then(|| SystemTime::UNIX_EPOCH + Duration::from_secs(meta.mtime() as u64)),
        headers,
    };
    let served = http_serve::serve(committed, &request);
    let (mut parts, body) = served.into_parts();
    if parts.status.is_success() {
        (parts.headers).insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    }
    Response::from_parts(parts, Body::new(body))
}

/// A committed file as `http-serve` sees it: its bytes and the host's validators.
struct Committed {
    content: Content,
    etag: Option<HeaderValue>,
    modified: Option<SystemTime>,
    /// Its `Content-Type`.
    headers: HeaderMap,
}

enum Content {
    /// Read whole, served from memory.
    Whole(Bytes),
    /// Read a chunk at a time as the client takes it.
    Chunked(ChunkedReadFile<Bytes, BoxError>),
}

impl Entity for Committed {
    type Error = BoxError;
    type Data = Bytes;

    fn len(&self) -> u64 {
        match &self.content {
            Content::Whole(data) => data.len() as u64,
            Content::Chunked(file) => file.len(),
        }
    }

    fn get_range(
        &self,
        range: Range<u64>,
    ) -> Pin<Box<dyn Stream<Item = Result<Bytes, BoxError>> + Send + Sync>> {
        match &self.content {
            Content::Whole(data) => {
                let part = data.slice(range.start as usize..range.end as usize);
                Box::pin(futures_util::stream::once(async move { Ok(part) }))
            }
            Content::Chunked(file) => file.get_range(range),
        }
    }

    fn add_headers(&self, headers: &mut HeaderMap) {
        headers.extend(self.headers.clone());
    }

    fn etag(&self) -> Option<HeaderValue> {
        self.etag.clone()
    }

    fn last_modified(&self) -> Option<SystemTime> {
        self.modified
    }
}

/// A file a static route may serve.
struct Found {
    /// The file to open (a folder's `index.html`), its type guessed from its name.
    path: PathBuf,
    /// Whether the request named a folder.
    folder: bool,
}

/// The file `rest` names under `root` (a folder's `index.html`),
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
    Some(Found { path, folder })
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
