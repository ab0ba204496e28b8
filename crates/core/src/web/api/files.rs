//! What the console reads of an actor's folders: the tail of its `stderr.log` (`GET
//! /api/actors/{id}/log`), one of its public or source files (`GET
//! /api/actors/{id}/files/{folder}/{path}`) and the lists of both for the actor's page.
//! Invariant: nothing but the log and the files under `public` and `source` is read; a path from
//! a URL goes through `inside` (plain names, no symlinks, no hidden temporaries), every read is
//! on the blocking pool and within the limits below.

use std::io::{Read, Seek, SeekFrom};
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;

use axum::Json;
use axum::extract::{Path as UrlPath, Query, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::{Value, json};

use super::actors::known;
use super::{App, refuse};

/// The most of `stderr.log` one call returns.
const LOG_CHUNK: u64 = 64 * 1024;
/// The largest file the console shows.
const FILE_LIMIT: u64 = 1 << 20;
/// The most files an actor's page lists per folder.
const FILES_LISTED: usize = 500;

/// The regular files under `dir`, as relative paths with `/`, sorted, at most
/// [`FILES_LISTED`]; hidden temporaries and symlinks left out.
pub(super) fn list_files(dir: &Path) -> Vec<String> {
    let mut files = Vec::new();
    let mut folders = vec![dir.to_path_buf()];
    while let Some(folder) = folders.pop() {
        let Ok(entries) = std::fs::read_dir(&folder) else {
            continue;
        };
        for entry in entries.flatten() {
            if crate::fs::is_temporary_name(&entry.file_name()) {
                continue;
            }
            let Ok(kind) = entry.file_type() else {
                continue;
            };
            let path = entry.path();
            if kind.is_dir() {
                folders.push(path);
            } else if kind.is_file()
                && let Ok(relative) = path.strip_prefix(dir)
            {
                files.push(relative.to_string_lossy().into_owned());
            }
        }
        if files.len() >= FILES_LISTED {
            break;
        }
    }
    files.sort();
    files.truncate(FILES_LISTED);
    files
}

#[derive(Deserialize)]
pub(super) struct LogQuery {
    from: Option<u64>,
}

/// `GET /api/actors/{id}/log?from=N`: `stderr.log` from byte N (the last 16 KiB without N) up
/// to [`LOG_CHUNK`] bytes: `{"from","to","text","rotated"}`; a page polls with `from` = the
/// last `to`. When the file is shorter than N it was rotated: the text starts from its
/// beginning and `rotated` is true.
pub(super) async fn log(
    State(app): State<Arc<App>>,
    UrlPath(id): UrlPath<String>,
    Query(query): Query<LogQuery>,
) -> Response {
    let (actor, kind) = match known(&app, &id).await {
        Ok(known) => known,
        Err(refused) => return refused.into_response(),
    };
    if kind == "native" {
        return Json(json!({"from": 0, "to": 0, "text": "", "rotated": false})).into_response();
    }
    let path = app.broker.world.log_path(&actor);
    let read = tokio::task::spawn_blocking(move || -> std::io::Result<Value> {
        let mut file = match std::fs::File::open(&path) {
            Ok(file) => file,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Ok(json!({"from": 0, "to": 0, "text": "", "rotated": false}));
            }
            Err(e) => return Err(e),
        };
        let size = file.metadata()?.len();
        let (from, rotated) = match query.from {
            Some(from) if from > size => (0, true),
            Some(from) => (from, false),
            None => (size.saturating_sub(16 * 1024), false),
        };
        let to = size.min(from + LOG_CHUNK);
        file.seek(SeekFrom::Start(from))?;
        let mut bytes = Vec::new();
        file.take(to - from).read_to_end(&mut bytes)?;
        Ok(json!({
            "from": from, "to": from + bytes.len() as u64,
            "text": String::from_utf8_lossy(&bytes), "rotated": rotated,
        }))
    })
    .await;
    match read {
        Ok(Ok(body)) => Json(body).into_response(),
        Ok(Err(e)) => refuse(
            StatusCode::INTERNAL_SERVER_ERROR,
            &format!("the log cannot be read: {e}"),
        ),
        Err(e) => refuse(StatusCode::INTERNAL_SERVER_ERROR, &e.to_string()),
    }
}

/// `GET /api/actors/{id}/files/{public|source}/{path}`: one file of the actor's public files or
/// running source, as text when it is UTF-8 (else as a download). No listing, nothing outside
/// the folder, no hidden temporaries, no symlinks, at most [`FILE_LIMIT`] bytes.
pub(super) async fn file(
    State(app): State<Arc<App>>,
    UrlPath((id, folder, path)): UrlPath<(String, String, String)>,
) -> Response {
    let (actor, _) = match known(&app, &id).await {
        Ok(known) => known,
        Err(refused) => return refused.into_response(),
    };
    let world = &app.broker.world;
    let base = match folder.as_str() {
        "public" => world.public_dir(&actor),
        "source" => world.source_dir(&actor),
        _ => {
            return refuse(
                StatusCode::NOT_FOUND,
                "files are under `public` or `source`",
            );
        }
    };
    // Looking at the folders on the way is file I/O too: all of it on the blocking pool.
    let read = tokio::task::spawn_blocking(move || -> Result<Vec<u8>, (StatusCode, String)> {
        let full = inside(&base, &path).ok_or_else(|| {
            (
                StatusCode::NOT_FOUND,
                format!("no file `{path}` in `{folder}`"),
            )
        })?;
        let meta = std::fs::symlink_metadata(&full)
            .map_err(|_| (StatusCode::NOT_FOUND, format!("no file `{path}`")))?;
        if !meta.is_file() {
            return Err((
                StatusCode::NOT_FOUND,
                format!("`{path}` is not a file (folders are not listed)"),
            ));
        }
        if meta.len() > FILE_LIMIT {
            return Err((
                StatusCode::PAYLOAD_TOO_LARGE,
                format!(
                    "`{path}` has {} bytes; the console shows files up to {} bytes",
                    meta.len(),
                    FILE_LIMIT
                ),
            ));
        }
        std::fs::read(&full).map_err(|e| (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))
    })
    .await;
    let bytes = match read {
        Ok(Ok(bytes)) => bytes,
        Ok(Err((status, why))) => return refuse(status, &why),
        Err(e) => return refuse(StatusCode::INTERNAL_SERVER_ERROR, &e.to_string()),
    };
    match String::from_utf8(bytes) {
        Ok(text) => ([(header::CONTENT_TYPE, "text/plain; charset=utf-8")], text).into_response(),
        Err(e) => (
            [
                (header::CONTENT_TYPE, "application/octet-stream"),
                (header::CONTENT_DISPOSITION, "attachment"),
            ],
            e.into_bytes(),
        )
            .into_response(),
    }
}

/// `base` joined with the relative `path`, if every part is a plain name (no `.`, `..`, root,
/// hidden temporary) and no folder on the way is a symlink.
fn inside(base: &Path, path: &str) -> Option<PathBuf> {
    let mut full = base.to_path_buf();
    for part in Path::new(path).components() {
        let Component::Normal(name) = part else {
            return None;
        };
        if crate::fs::is_temporary_name(name) {
            return None;
        }
        if full != base
            && std::fs::symlink_metadata(&full)
                .ok()?
                .file_type()
                .is_symlink()
        {
            return None;
        }
        full.push(name);
    }
    (full != base).then_some(full)
}
