//! A TCP proxy between a host and one NATS node that a test cuts and heals, to make partitions
//! for real while both ends keep running: stalled, every byte in either direction is held (a
//! network that drops packets: TCP keeps the connection and delivers what was held once it
//! heals, unless an end gave up first); severed, every connection is reset and new ones are
//! closed at once (a peer that refuses). Healed, bytes flow again and new connections go through.

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::{Arc, Condvar, Mutex};

/// Bytes a pump moves at a time.
const CHUNK: usize = 64 << 10;

#[derive(Clone, Copy, PartialEq, Debug)]
enum Link {
    Open,
    Stalled,
    Severed,
}

#[derive(Default)]
struct Shared {
    link: Mutex<Option<Link>>,
    changed: Condvar,
    /// Both ends of every connection made, to reset them when severed.
    connections: Mutex<Vec<TcpStream>>,
}

impl Shared {
    fn link(&self) -> Link {
        self.link.lock().unwrap().unwrap_or(Link::Open)
    }

    fn set(&self, link: Link) {
        *self.link.lock().unwrap() = Some(link);
        self.changed.notify_all();
        if link == Link::Severed {
            for stream in self.connections.lock().unwrap().drain(..) {
                let _ = stream.shutdown(Shutdown::Both);
            }
        }
    }

    /// Waits while stalled; false once severed.
    fn may_pass(&self) -> bool {
        let mut link = self.link.lock().unwrap();
        loop {
            match link.unwrap_or(Link::Open) {
                Link::Open => return true,
                Link::Severed => return false,
                Link::Stalled => link = self.changed.wait(link).unwrap(),
            }
        }
    }
}

/// A proxy to one NATS node, on a free local port, for as long as the test holds it.
pub struct Proxy {
    addr: SocketAddr,
    shared: Arc<Shared>,
}

impl Proxy {
    /// Listens on a free port and passes every connection on to `upstream` (`nats://host:port`
    /// or `host:port`).
    pub fn start(upstream: &str) -> Proxy {
        Proxy::start_at(0, upstream)
    }

    /// [`Proxy::start`] on loopback port `port` (0: any free one).
    pub fn start_at(port: u16, upstream: &str) -> Proxy {
        let upstream = upstream.trim_start_matches("nats://").to_string();
        let listener = TcpListener::bind(("127.0.0.1", port)).unwrap();
        let addr = listener.local_addr().unwrap();
        let shared = Arc::new(Shared::default());
        let accepting = shared.clone();
        std::thread::spawn(move || {
            for client in listener.incoming() {
                let Ok(client) = client else { continue };
                if accepting.link() == Link::Severed {
                    continue; // dropped: closed at once
                }
                let Ok(server) = TcpStream::connect(&upstream) else {
                    continue; // the node is down: so is the connection
                };
                let _ = (client.set_nodelay(true), server.set_nodelay(true));
                let mut connections = accepting.connections.lock().unwrap();
                connections.push(client.try_clone().unwrap());
                connections.push(server.try_clone().unwrap());
                drop(connections);
                pump(
                    &accepting,
                    client.try_clone().unwrap(),
                    server.try_clone().unwrap(),
                );
                pump(&accepting, server, client);
            }
        });
        Proxy { addr, shared }
    }

    /// The URL a host is given instead of the node's.
    pub fn url(&self) -> String {
        format!("nats://{}", self.addr)
    }

    /// Holds every byte, both ways, until [`Proxy::heal`].
    pub fn stall(&self) {
        self.shared.set(Link::Stalled);
    }

    /// Resets every connection and refuses new ones until [`Proxy::heal`].
    pub fn sever(&self) {
        self.shared.set(Link::Severed);
    }

    pub fn heal(&self) {
        self.shared.set(Link::Open);
    }
}

/// Copies `from` to `to` on a thread of its own, each chunk once the link lets it pass; ends
/// both when either end closes or the link is severed.
fn pump(shared: &Arc<Shared>, mut from: TcpStream, mut to: TcpStream) {
    let shared = shared.clone();
    std::thread::spawn(move || {
        let mut buffer = vec![0; CHUNK];
        loop {
            let n = match from.read(&mut buffer) {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            };
            if !shared.may_pass() || to.write_all(&buffer[..n]).is_err() {
                break;
            }
        }
        let _ = from.shutdown(Shutdown::Both);
        let _ = to.shutdown(Shutdown::Both);
    });
}
