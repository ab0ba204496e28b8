//! A world over several hosts (DESIGN §16) runs on a real NATS server with JetStream. So far:
//! the server the tests start and stop on their own free ports (`support::nats`).

mod support;

use support::nats::Nats;

#[test]
fn a_nats_server_with_jetstream_runs_on_free_ports_of_its_own_and_stops_when_dropped() {
    let (one, two) = (Nats::start(), Nats::start());
    assert_ne!(one.port, two.port);
    assert!(one.url().starts_with("nats://127.0.0.1:"));
    let report = one.jetstream();
    assert!(
        report["config"]["store_dir"].is_string(),
        "JetStream is on: {report}"
    );
    assert_eq!(report["streams"], 0, "a store of its own, empty: {report}");
    let port = one.port;
    drop(one);
    support::eventually("the server to stop", || {
        std::net::TcpStream::connect(("127.0.0.1", port)).is_err()
    });
    assert!(two.healthy(), "the other server is untouched");
}
