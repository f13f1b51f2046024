//! Serves the admin endpoint with a few metrics recorded on named threads, for a bounded time.
//!
//! `cargo run -p tern-metrics --example admin_server -- 127.0.0.1:9100 30` then
//! `curl 127.0.0.1:9100/metrics?per_thread=1`, `/stats`, `/healthz`, `/campaigns`, or `/` for the list.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tern_metrics::{AdminServer, Counter, CounterFamily, Gauge, Histogram};

static REQUESTS: Counter = Counter::new("demo_requests_total", "Requests served");
static COMMANDS: CounterFamily = CounterFamily::new(
    "demo_commands_total",
    "Commands by type",
    "cmd",
    &["get", "set"],
);
static CONNECTIONS: Gauge = Gauge::new("demo_connections", "Open connections");
static LATENCY: Histogram = Histogram::new("demo_latency_ns", "Request latency in nanoseconds");

fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1);
    let addr = args
        .next()
        .unwrap_or_else(|| "127.0.0.1:0".into())
        .parse()?;
    let seconds: u64 = args.next().map_or(Ok(10), |s| s.parse())?;

    let admin = AdminServer::builder(addr)
        .json_route(
            "/campaigns",
            "an example service's JSON",
            Arc::new(|| serde_json::json!({ "campaign-1": { "budget": 100 } })),
        )
        .start()?;
    println!("admin endpoint on http://{}", admin.local_addr());

    let deadline = Instant::now() + Duration::from_secs(seconds);
    let workers: Vec<_> = (0..2)
        .map(|i| {
            std::thread::spawn(move || {
                tern_metrics::set_thread_name(&format!("io-{i}"));
                CONNECTIONS.incr();
                while Instant::now() < deadline {
                    let started = Instant::now();
                    REQUESTS.incr();
                    COMMANDS.incr(i % 2);
                    std::thread::sleep(Duration::from_millis(1));
                    LATENCY.record_duration(started.elapsed());
                }
                CONNECTIONS.decr();
            })
        })
        .collect();
    for worker in workers {
        worker.join().expect("worker panicked");
    }
    admin.set_draining();
    admin.shutdown()
}
