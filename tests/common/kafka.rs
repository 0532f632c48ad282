//! A real Kafka-protocol broker for tests (tansu, installed by
//! `scripts/kafka-broker.sh`), a TCP proxy in front of it that can take the
//! broker away and bring it back, and clients to fill and read topics.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rdkafka::ClientConfig;
use rdkafka::error::KafkaError;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::{Headers, Message};
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use rdkafka::{Offset, TopicPartitionList};

use super::workspace;

/// The tansu executable: `$WEIR_TANSU`, else what the install script says.
fn tansu() -> String {
    if let Ok(path) = std::env::var("WEIR_TANSU") {
        return path;
    }
    let out = Command::new("bash")
        .arg(workspace().join("scripts/kafka-broker.sh"))
        .arg("path")
        .output()
        .expect("run scripts/kafka-broker.sh");
    assert!(out.status.success(), "scripts/kafka-broker.sh failed: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap().trim().to_owned()
}

/// Two distinct free ports. Both listeners are held until both ports are
/// known: bound one after the other, the kernel may hand out the same port
/// twice, and a proxy forwarding to its own port opens connections to
/// itself until the process runs out of files (seen once in CI).
fn free_ports() -> (u16, u16) {
    let (first, second) = (TcpListener::bind("127.0.0.1:0").unwrap(), TcpListener::bind("127.0.0.1:0").unwrap());
    (first.local_addr().unwrap().port(), second.local_addr().unwrap().port())
}

/// A broker on 127.0.0.1, reached through a [`Proxy`] (clients only ever
/// see the proxy's address, which the broker advertises).
pub struct Broker {
    child: Child,
    pub proxy: Proxy,
}

impl Broker {
    pub fn start() -> Broker {
        let broker = Broker::spawn(&[]);
        broker.wait_until_up();
        broker
    }

    /// A broker that requires SASL/SCRAM authentication (and knows no user).
    pub fn start_with_authentication() -> Broker {
        Broker::spawn(&["--authentication"])
    }

    fn spawn(extra: &[&str]) -> Broker {
        let (port, public) = free_ports();
        let child = Command::new(tansu())
            .args(["broker", "--listener-url", &format!("tcp://127.0.0.1:{port}")])
            .args(["--advertised-listener-url", &format!("tcp://127.0.0.1:{public}")])
            .args(["--storage-engine", "memory://tansu/"])
            .args(extra)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start the tansu broker");
        let proxy = Proxy::start(public, port);
        Broker { child, proxy }
    }

    /// The bootstrap address clients use.
    pub fn address(&self) -> String {
        format!("127.0.0.1:{}", self.proxy.port)
    }

    fn wait_until_up(&self) {
        let consumer: BaseConsumer = self.config().create().unwrap();
        let deadline = Instant::now() + Duration::from_secs(30);
        while consumer.fetch_metadata(None, Duration::from_secs(1)).is_err() {
            assert!(Instant::now() < deadline, "the tansu broker did not come up");
        }
    }

    pub fn config(&self) -> ClientConfig {
        let mut config = ClientConfig::new();
        config.set("bootstrap.servers", self.address()).set("log_level", "2");
        config
    }

    pub fn create_topic(&self, name: &str, partitions: i32) {
        let admin: AdminClient<DefaultClientContext> = self.config().create().unwrap();
        let topic = NewTopic::new(name, partitions, TopicReplication::Fixed(1));
        let results = block_on(admin.create_topics(&[topic], &AdminOptions::new())).expect("create topic");
        for result in results {
            result.unwrap_or_else(|(topic, error)| panic!("cannot create topic {topic}: {error}"));
        }
    }

    /// Produces `records` (key, value), partitioned by key, and waits until
    /// all are acknowledged.
    pub fn produce(&self, topic: &str, records: impl IntoIterator<Item = (String, String)>) {
        let producer = self.test_producer();
        for (key, value) in records {
            send(&producer, BaseRecord::to(topic).key(key.as_bytes()).payload(value.as_bytes()));
        }
        producer.flush(Duration::from_secs(30)).expect("flush the test producer");
    }

    /// Produces `records` (key, value, timestamp in ms) to `partition`, and
    /// waits until all are acknowledged.
    pub fn produce_timed(&self, topic: &str, partition: i32, records: impl IntoIterator<Item = (String, String, i64)>) {
        let producer = self.test_producer();
        for (key, value, timestamp) in records {
            let record = BaseRecord::to(topic).partition(partition).key(key.as_bytes()).payload(value.as_bytes());
            send(&producer, record.timestamp(timestamp));
        }
        producer.flush(Duration::from_secs(30)).expect("flush the test producer");
    }

    /// A producer that sends one record per batch: tansu 0.6 reports a
    /// partition's high watermark as its last *batch's* base offset + 1,
    /// and bounded sources stop at the high watermark.
    fn test_producer(&self) -> BaseProducer {
        self.config().set("linger.ms", "0").set("batch.num.messages", "1").create().unwrap()
    }

    /// Every record of `topic`, those of aborted transactions too
    /// (`read_uncommitted`: the tests do not rely on the broker's account
    /// of aborted transactions, see [`committed_records`]), read from the
    /// start of each partition until the consumer reports that it has
    /// reached the partition's end (librdkafka's partition EOF: its fetch
    /// position has passed the high watermark of the latest fetch).
    ///
    /// The start is offset 0, not the "earliest" offset the broker reports:
    /// tansu 0.6 sometimes reports 1 for a partition whose first batch holds
    /// many records, and a fetch from there skips that whole batch (the
    /// tests' topics are new and never truncated). A read that meets a
    /// consumer error is made again from the start.
    pub fn read_all(&self, topic: &str) -> Vec<OutputRecord> {
        for attempt in 1..=3 {
            match self.read_once(topic) {
                Ok(records) => return records,
                Err(error) => eprintln!("reading {topic}, attempt {attempt}: {error}; reading it again"),
            }
        }
        panic!("could not read topic {topic} in three attempts");
    }

    fn read_once(&self, topic: &str) -> Result<Vec<OutputRecord>, String> {
        let consumer: BaseConsumer = self
            .config()
            .set("group.id", "weir-test-reader")
            .set("isolation.level", "read_uncommitted")
            .set("enable.partition.eof", "true")
            .set("auto.offset.reset", "error")
            .create()
            .map_err(|e| e.to_string())?;
        let metadata = consumer.fetch_metadata(Some(topic), Duration::from_secs(10)).map_err(|e| e.to_string())?;
        let mut list = TopicPartitionList::new();
        let mut unfinished = BTreeSet::new();
        for partition in metadata.topics()[0].partitions() {
            list.add_partition_offset(topic, partition.id(), Offset::Offset(0)).map_err(|e| e.to_string())?;
            unfinished.insert(partition.id());
        }
        consumer.assign(&list).map_err(|e| e.to_string())?;
        let mut records = Vec::new();
        let mut read: BTreeMap<i32, (i64, i64)> = BTreeMap::new();
        let deadline = Instant::now() + Duration::from_secs(120);
        while !unfinished.is_empty() {
            if Instant::now() > deadline {
                return Err(format!("not at the end after 120 s: read offsets {read:?}, unfinished {unfinished:?}"));
            }
            let message = match consumer.poll(Duration::from_millis(100)) {
                None => continue,
                Some(Err(KafkaError::PartitionEOF(partition))) => {
                    unfinished.remove(&partition);
                    continue;
                }
                Some(Err(error)) => return Err(format!("consumer error: {error}")),
                Some(Ok(message)) => message,
            };
            let (partition, offset) = (message.partition(), message.offset());
            read.entry(partition).or_insert((offset, offset)).1 = offset;
            let header = |name: &str| {
                let headers = message.headers()?;
                headers.iter().find(|h| h.key == name).and_then(|h| h.value).map(|v| String::from_utf8_lossy(v).into_owned())
            };
            records.push(OutputRecord {
                key: String::from_utf8_lossy(message.key().unwrap_or_default()).into_owned(),
                value: String::from_utf8_lossy(message.payload().unwrap_or_default()).into_owned(),
                checkpoint: header("weir.checkpoint").and_then(|c| c.parse().ok()),
                attempt: header("weir.attempt"),
            });
        }
        eprintln!("read {topic} to its end: {} records, offsets (first, last) {read:?}", records.len());
        Ok(records)
    }
}

impl Broker {
    /// The offsets group `group` has committed for `topic`, summed over
    /// its partitions.
    pub fn committed_offsets(&self, group: &str, topic: &str) -> i64 {
        let consumer: BaseConsumer = self.config().set("group.id", group).create().unwrap();
        let metadata = consumer.fetch_metadata(Some(topic), Duration::from_secs(10)).unwrap();
        let mut list = TopicPartitionList::new();
        for partition in metadata.topics()[0].partitions() {
            list.add_partition(topic, partition.id());
        }
        let committed = consumer.committed_offsets(list, Duration::from_secs(10)).unwrap();
        committed.elements().iter().filter_map(|e| e.offset().to_raw()).filter(|&o| o >= 0).sum()
    }
}

impl Drop for Broker {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A record of an output topic, with Weir's headers.
#[derive(Debug, Clone)]
pub struct OutputRecord {
    pub key: String,
    pub value: String,
    pub checkpoint: Option<u64>,
    pub attempt: Option<String>,
}

/// The records a reader that cannot trust its broker's isolation takes as
/// committed: per (writer, checkpoint), those of the last attempt — an
/// epoch is sent again only when its earlier attempt was aborted. Also
/// returns how many records of aborted attempts were dropped.
pub fn committed_records(records: Vec<OutputRecord>) -> (Vec<OutputRecord>, usize) {
    let attempt_of = |r: &OutputRecord| {
        let attempt = r.attempt.clone().expect("every record names its commit attempt");
        let (writer, nanos) = attempt.rsplit_once('/').expect("attempt = writer/nanos");
        (writer.to_owned(), nanos.parse::<u128>().unwrap())
    };
    let mut last: BTreeMap<(String, u64), u128> = BTreeMap::new();
    for record in &records {
        let (writer, nanos) = attempt_of(record);
        let checkpoint = record.checkpoint.expect("every record names its checkpoint");
        let slot = last.entry((writer, checkpoint)).or_default();
        *slot = (*slot).max(nanos);
    }
    let total = records.len();
    let kept: Vec<OutputRecord> = records
        .into_iter()
        .filter(|r| {
            let (writer, nanos) = attempt_of(r);
            last[&(writer, r.checkpoint.unwrap())] == nanos
        })
        .collect();
    let dropped = total - kept.len();
    (kept, dropped)
}

/// Forwards 127.0.0.1:`port` to the broker; `down` refuses connections
/// and cuts the open ones, as a broker that went away would.
pub struct Proxy {
    pub port: u16,
    up: Arc<AtomicBool>,
    /// While set, connections are taken but nothing is passed on: a hung
    /// broker, or a network that drops packets.
    frozen: Arc<AtomicBool>,
    connections: Arc<Mutex<Connections>>,
}

/// The open connections through a proxy, each as its client's and its
/// broker's streams, by number: `down` cuts them, and one that ends is
/// taken out (else a long test's closed sockets would pile up as open
/// files).
#[derive(Default)]
struct Connections {
    next: u64,
    open: HashMap<u64, [TcpStream; 2]>,
}

impl Proxy {
    fn start(port: u16, target: u16) -> Proxy {
        let up = Arc::new(AtomicBool::new(true));
        let frozen = Arc::new(AtomicBool::new(false));
        let connections = Arc::new(Mutex::new(Connections::default()));
        let (flag, ice, open) = (up.clone(), frozen.clone(), connections.clone());
        std::thread::spawn(move || accept_loop(port, target, flag, ice, open));
        Proxy { port, up, frozen, connections }
    }

    /// The broker hangs: connections stay open, and are still taken, but
    /// nothing passes until `thaw`.
    pub fn freeze(&self) {
        self.frozen.store(true, Ordering::SeqCst);
    }

    pub fn thaw(&self) {
        self.frozen.store(false, Ordering::SeqCst);
    }

    /// The broker becomes unreachable: connections refused and cut.
    /// The flag flips under the registry's lock, so a connection being
    /// accepted at this moment is either cut here or dropped by the
    /// accept loop — none survives the outage.
    pub fn down(&self) {
        let mut connections = self.connections.lock().unwrap();
        self.up.store(false, Ordering::SeqCst);
        for stream in connections.open.drain().flat_map(|(_, streams)| streams) {
            let _ = stream.shutdown(Shutdown::Both);
        }
    }

    pub fn up(&self) {
        self.up.store(true, Ordering::SeqCst);
    }
}

fn accept_loop(port: u16, target: u16, up: Arc<AtomicBool>, frozen: Arc<AtomicBool>, connections: Arc<Mutex<Connections>>) {
    loop {
        // While down, the port is closed: connecting is refused.
        while !up.load(Ordering::SeqCst) {
            std::thread::sleep(Duration::from_millis(20));
        }
        let listener = loop {
            match TcpListener::bind(("127.0.0.1", port)) {
                Ok(listener) => break listener,
                Err(_) => std::thread::sleep(Duration::from_millis(20)),
            }
        };
        listener.set_nonblocking(true).unwrap();
        while up.load(Ordering::SeqCst) {
            match listener.accept() {
                Ok((client, _)) => {
                    client.set_nonblocking(false).unwrap();
                    let Ok(server) = TcpStream::connect(("127.0.0.1", target)) else { continue };
                    let mut registry = connections.lock().unwrap();
                    if !up.load(Ordering::SeqCst) {
                        break; // Went down while this one was accepted: drop it.
                    }
                    let id = registry.next;
                    registry.next += 1;
                    registry.open.insert(id, [client.try_clone().unwrap(), server.try_clone().unwrap()]);
                    pipe(client.try_clone().unwrap(), server.try_clone().unwrap(), id, frozen.clone(), connections.clone());
                    pipe(server, client, id, frozen.clone(), connections.clone());
                }
                Err(error) if error.kind() == ErrorKind::WouldBlock => std::thread::sleep(Duration::from_millis(5)),
                Err(_) => break,
            }
        }
    }
}

/// Copies one direction of connection `id` until either side closes (and
/// holds what it read while the proxy is frozen), then closes both and
/// takes the connection out of the registry.
fn pipe(mut from: TcpStream, mut to: TcpStream, id: u64, frozen: Arc<AtomicBool>, connections: Arc<Mutex<Connections>>) {
    std::thread::spawn(move || {
        let mut buffer = vec![0; 64 << 10];
        loop {
            let read = match from.read(&mut buffer) {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            };
            while frozen.load(Ordering::SeqCst) {
                std::thread::sleep(Duration::from_millis(20));
            }
            if to.write_all(&buffer[..read]).is_err() {
                break;
            }
        }
        let _ = to.shutdown(Shutdown::Both);
        let _ = from.shutdown(Shutdown::Both);
        connections.lock().unwrap().open.remove(&id);
    });
}

/// Sends `record`, waiting while the producer's queue is full.
fn send(producer: &BaseProducer, mut record: BaseRecord<'_, [u8], [u8]>) {
    loop {
        match producer.send(record) {
            Ok(()) => return,
            Err((_, back)) => {
                producer.poll(Duration::from_millis(10));
                record = back;
            }
        }
    }
}

/// Runs a future to completion on this thread (the admin API is async).
fn block_on<F: std::future::Future>(future: F) -> F::Output {
    use std::task::{Context, Poll, Wake, Waker};
    struct Unpark(std::thread::Thread);
    impl Wake for Unpark {
        fn wake(self: Arc<Self>) {
            self.0.unpark();
        }
    }
    let waker = Waker::from(Arc::new(Unpark(std::thread::current())));
    let mut context = Context::from_waker(&waker);
    let mut future = std::pin::pin!(future);
    loop {
        if let Poll::Ready(value) = future.as_mut().poll(&mut context) {
            return value;
        }
        std::thread::park_timeout(Duration::from_millis(50));
    }
}
