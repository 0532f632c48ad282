//! Value state held in the instance's memory from call to call.
//!
//! A keyed count touches about as many keys per batch as the batch has
//! events, so a per-batch cache amortises nothing: reading every key's value
//! from the host (`get-all`) and writing it back (`set-many`) cost two
//! lookups in the host's hash table and a JSON round trip per event. So a
//! [`crate::ValueState`] keeps its values here, typed, between calls. At its
//! first use in a call it resolves all of the call's keys at once — a hash
//! of each distinct key's bytes, remembered by the key's slot for the rest
//! of the call — and reads the keys it does not hold with one `get-many`.
//! Changed values go back by key (`set-keyed`) when the host calls `flush`
//! before a snapshot, or when the instance holds too much
//! ([`crate::state::RESIDENT_BYTES`]) — the keys used least recently are
//! forgotten then, and read again when next used (or, when keys cycle
//! through more than the store holds, a quarter used most recently: see
//! [`ValueStore::evict_cold`]). What reaches the host is
//! the JSON the per-batch cache wrote: a snapshot cannot tell the two apart.
//!
//! On empty state (`weir.state = empty`) a key the store has not written
//! has no value, and is not asked for; once it forgets keys it records
//! which ([`ForgottenKeys`], a Bloom filter), and asks for those only.

use serde::Serialize;
use serde::de::DeserializeOwned;
use weir_key_slab::{KeySlab, ResolveError};

use crate::Error;
use crate::context::CallKeys;
use crate::forgotten_keys::ForgottenKeys;
use crate::state::{CallClock, EncodedSizes, HeapEstimate, HostStart, KeyedColumns, RawValueState, Resident, decode_stored, lowest_ranks_cutoff};

/// One key's value as held.
pub(crate) struct HeldValue<T> {
    /// The value (`None`: the key has none), or why the stored bytes could
    /// not be read — an error for whoever reads them, not for the batch.
    value: Result<Option<T>, String>,
    /// Changed since it was read from or written to the host.
    changed: bool,
    /// The call it was last used in ([`CallClock`]).
    used: u32,
}

impl<T> HeldValue<T> {
    /// The value, or the error of reading it.
    #[inline]
    pub fn value(&self) -> Result<Option<&T>, Error> {
        self.value.as_ref().map(Option::as_ref).map_err(|message| Error::State(message.clone()))
    }

    /// Takes the value out to replace it (see [`HeldValue::set`]).
    #[inline]
    pub fn take(&mut self) -> Result<Option<T>, Error> {
        self.value()?;
        Ok(std::mem::replace(&mut self.value, Ok(None)).unwrap_or(None))
    }

    /// Sets (`Some`) or clears (`None`) the value.
    #[inline]
    pub fn set(&mut self, value: Option<T>) {
        self.value = Ok(value);
        self.changed = true;
    }
}

/// Every held value of one value state, by key.
pub(crate) struct ValueStore<T> {
    /// The state's name, for errors.
    name: String,
    raw: Box<dyn RawValueState>,
    held: KeySlab<HeldValue<T>>,
    /// Whether this call's keys are resolved.
    resolved: bool,
    /// Whether any entry was handed out (and so may have changed) since
    /// the last write-back.
    touched: bool,
    clock: CallClock,
    /// The keys forgotten while the host held their values, when the
    /// instance started on empty state (`None`: restored — any key not held
    /// may have a value). A key not held and not among them has no value,
    /// and is not asked for.
    forgotten: Option<ForgottenKeys>,
    /// What `forgotten` spared lately.
    filter_use: FilterUse,
    /// The keys not held when asked for since the last eviction.
    misses: Misses,
    /// What the values own on the heap.
    heap: HeapEstimate,
    /// Whether values are held for one call only (the state expires: the
    /// host judges what is live, at each read and write).
    per_call: bool,
}

impl<T: Serialize + DeserializeOwned> ValueStore<T> {
    /// A store of the state `name`, on an instance whose resident state may
    /// hold `resident_bytes`; a 32nd of that is the most its record of
    /// forgotten keys takes (7.5 MiB by default: 20 bits a key for 3
    /// million).
    ///
    /// `per_call`: values are written back and forgotten at the end of
    /// each call.
    pub fn new(name: &str, raw: Box<dyn RawValueState>, start: HostStart, resident_bytes: usize, per_call: bool) -> Self {
        ValueStore {
            name: name.to_owned(),
            raw,
            held: KeySlab::default(),
            resolved: false,
            touched: false,
            clock: CallClock::default(),
            // Every key a per-call store forgets may have a value.
            forgotten: (start == HostStart::Empty && !per_call).then(|| ForgottenKeys::new(resident_bytes / 32)),
            filter_use: FilterUse::default(),
            misses: Misses::default(),
            heap: HeapEstimate::for_values_of(size_of::<T>()),
            per_call,
        }
    }

    /// The value of the key in `slot` of the current call, whose keys are
    /// `keys`: resolved (and read from the host if not held) on first use.
    #[inline]
    pub fn slot(&mut self, slot: u32, keys: &CallKeys<'_>) -> Result<&mut HeldValue<T>, Error> {
        if !self.resolved {
            self.resolve(keys)?;
        }
        match self.held.in_call(slot) {
            Some(entry) => {
                self.touched = true;
                let held = self.held.get_mut(entry);
                held.used = self.clock.now();
                Ok(held)
            }
            None => Err(Error::State(format!("slot {slot} is outside the current batch"))),
        }
    }

    /// Finds the entry of every key of the call; keys not held get one,
    /// filled from the host in one read. If anything fails, the new entries
    /// are dropped again, so that no later call takes them for absent.
    ///
    /// Once per call, so kept out of line: it is most of the code of an
    /// operator's `process` that uses the state, and inlined there it
    /// would sit in the SDK's per-event loop that `process` is inlined into
    /// (see `docs/plugin-guide.md`, "In Rust"): 573 instructions an event
    /// for `word-count` against 594 inlined (callgrind).
    #[inline(never)]
    fn resolve(&mut self, keys: &CallKeys<'_>) -> Result<(), Error> {
        // The call's first resolve: no slot of it may be remembered yet.
        self.held.begin_call();
        let mut missing = Vec::new();
        let resolved = self.find_slots(keys, &mut missing).and_then(|()| self.fetch(&missing));
        if let Err(error) = resolved {
            for (_, entry) in missing {
                self.held.remove(entry);
            }
            self.held.begin_call();
            return Err(error);
        }
        self.resolved = true;
        Ok(())
    }

    /// Gives every slot of the call its entry; entries made for keys not
    /// held are listed in `missing` as (slot, entry).
    fn find_slots(&mut self, keys: &CallKeys<'_>, missing: &mut Vec<(u32, u32)>) -> Result<(), Error> {
        let now = self.clock.now();
        let held = || HeldValue { value: Ok(None), changed: false, used: now };
        self.held.resolve_call(keys.slots(), |i| keys.key(i), held, missing).map_err(|failed| match failed {
            ResolveError::Key(error) => error,
            ResolveError::SlotOutOfOrder(order) => Error::input(order.to_string()),
        })
    }

    /// Reads the values of `(slot, entry)` from the host into their (new,
    /// empty) entries — those the host may hold.
    fn fetch(&mut self, missing: &[(u32, u32)]) -> Result<(), Error> {
        // On empty state, only keys forgotten while the host held them may.
        let may_be_stored = |entry| self.forgotten.as_ref().is_none_or(|forgotten| forgotten.may_contain(self.held.key(entry)));
        let (slots, entries): (Vec<u32>, Vec<u32>) = missing.iter().copied().filter(|&(_, entry)| may_be_stored(entry)).unzip();
        if self.forgotten.is_some() && self.filter_use.spares_too_little(missing.len(), missing.len() - slots.len()) {
            self.forgotten = None;
        }
        let returned = if slots.is_empty() { 0 } else { self.read(&slots, &entries)? };
        // Keys known absent, not read, count as missed all the same.
        self.misses.count(missing.len(), returned);
        Ok(())
    }

    /// Reads the values of `slots` from the host into their (new, empty)
    /// `entries`; returns how many the host had.
    fn read(&mut self, slots: &[u32], entries: &[u32]) -> Result<usize, Error> {
        let values = self.raw.get_many(slots)?;
        values.check_answer(slots.len(), format_args!("state `{}`", self.name))?;
        let mut stored = 0;
        for (i, &entry) in entries.iter().enumerate() {
            if let Some(bytes) = values.value(i) {
                stored += 1;
                let value = self.decode(bytes).map(Some);
                self.held.get_mut(entry).value = value;
            }
        }
        Ok(stored)
    }

    /// Encodes `value` of the state `name` as the host holds it.
    fn encode(name: &str, value: &T, out: &mut Vec<u8>) -> Result<(), Error> {
        out.clear();
        crate::codec::write_state_json(out, value).map_err(|e| Error::State(format!("cannot encode value state `{name}`: {e}")))
    }

    fn decode(&self, bytes: &[u8]) -> Result<T, String> {
        decode_stored("value state", &self.name, bytes)
    }
}

/// What a record of forgotten keys spared lately: of the keys not held
/// that it was asked about, how many it knew were never stored (and were
/// not read from the host). Once keys cycle through more than the store
/// holds, nearly every key not held was forgotten: the record spares no
/// read, yet costs a load from memory for every key asked about and every
/// key forgotten. Then the store drops it.
#[derive(Debug, Default)]
struct FilterUse {
    asked: usize,
    spared: usize,
}

impl FilterUse {
    /// Keys asked about between judgements.
    const ROUND: usize = if cfg!(test) { 64 } else { 1 << 16 };

    /// Counts `asked` keys of which `spared` were not read; at the end of a
    /// round, whether the record spared too few of them (under one in 32)
    /// to keep.
    fn spares_too_little(&mut self, asked: usize, spared: usize) -> bool {
        self.asked += asked;
        self.spared += spared;
        if self.asked < Self::ROUND {
            return false;
        }
        let too_few = self.spared < self.asked / 32;
        *self = FilterUse::default();
        too_few
    }
}

/// The keys a store did not hold when asked for since its last eviction,
/// and how many of those the host had a value for: keys it wrote and
/// forgot, or a restored state's.
#[derive(Debug, Default)]
struct Misses {
    missed: usize,
    returned: usize,
}

impl Misses {
    fn count(&mut self, missed: usize, returned: usize) {
        self.missed += missed;
        self.returned += returned;
    }

    /// Whether nearly every key missed had been stored (seven in eight):
    /// keys cycling through more than the store holds, each forgotten
    /// before it comes round again — not new keys coming, nor a few old
    /// ones among those held.
    fn keys_cycle(&self) -> bool {
        self.missed > 0 && self.returned * 8 >= self.missed * 7
    }
}

/// Sends `writes`, if any, to the value state `raw` and empties them.
fn send(writes: &mut KeyedColumns, raw: &dyn RawValueState) -> Result<(), Error> {
    if writes.len() > 0 {
        raw.set_keyed(&writes.keys, &writes.key_offsets, &writes.values)?;
        writes.clear();
    }
    Ok(())
}

impl<T: Serialize + DeserializeOwned> Resident for ValueStore<T> {
    fn write_back(&mut self) -> Result<(), Error> {
        if !self.touched {
            return Ok(());
        }
        let mut writes = KeyedColumns::new();
        let mut encoded = Vec::new();
        let mut sizes = EncodedSizes::default();
        for (key, held) in self.held.iter() {
            if !held.changed {
                continue;
            }
            match &held.value {
                Ok(Some(value)) => {
                    Self::encode(&self.name, value, &mut encoded)?;
                    writes.push(key, Some(&encoded));
                    sizes.add(&encoded);
                }
                // Only `set` marks an entry changed, and it leaves a value
                // or none, never an unreadable one.
                Ok(None) | Err(_) => writes.push(key, None),
            }
            if writes.is_full() {
                send(&mut writes, self.raw.as_ref())?;
            }
        }
        // On failure every entry stays changed: the next flush writes them
        // all again.
        send(&mut writes, self.raw.as_ref())?;
        for held in self.held.values_mut() {
            held.changed = false;
        }
        self.touched = false;
        self.heap.measure(sizes);
        Ok(())
    }

    fn len(&self) -> usize {
        self.held.len()
    }

    fn bytes(&self) -> usize {
        let forgotten = self.forgotten.as_ref().map_or(0, ForgottenKeys::bytes);
        self.held.bytes() + self.held.len() * self.heap.per_entry() + forgotten
    }

    /// Measures what values own, when it is time to sample them; a
    /// per-call store writes back and forgets what it holds.
    fn end_call(&mut self) -> Result<(), Error> {
        if self.per_call {
            self.write_back()?;
            self.evict_cold(0);
            return Ok(());
        }
        let values = self.held.iter().filter_map(|(_, held)| held.value.as_ref().ok()?.as_ref());
        self.heap.sample(self.held.len(), values, |value, out| Self::encode(&self.name, value, out));
        Ok(())
    }

    /// Drops the record of forgotten keys (the instance holds more states
    /// than its bound has room for with it): from now on every key not
    /// held is asked for.
    fn forget_listings(&mut self) {
        self.forgotten = None;
    }

    fn begin_call(&mut self) {
        self.resolved = false;
        self.held.begin_call();
        self.clock.tick();
    }

    /// Forgets all but the `keep` entries used most recently — unless keys
    /// cycle through more than the store holds ([`Misses::keys_cycle`]):
    /// then the entries used most recently are those asked for last, and
    /// keeping them, the store would hold nothing it is asked for next
    /// (a simulation of keys cycling through 1.8 times the room: no key
    /// found held). Then it keeps three quarters, those used least
    /// recently: the next to come round (there: 36 % found held).
    fn evict_cold(&mut self, keep: usize) {
        let cycling = !self.per_call && std::mem::take(&mut self.misses).keys_cycle();
        let clock = self.clock;
        let rank = |held: &HeldValue<T>| if cycling { u32::MAX - clock.age(held.used) } else { clock.age(held.used) };
        let keep = if cycling { self.held.len() * 3 / 4 } else { keep };
        let Some(cold) = lowest_ranks_cutoff(self.held.iter().map(|(_, held)| rank(held)), keep) else { return };
        let stays = |held: &HeldValue<T>| held.changed || rank(held) < cold;
        if let Some(forgotten) = &mut self.forgotten {
            // Those the host holds a value of (all are written back).
            let gone = self.held.iter().filter(|(_, held)| !stays(held) && !matches!(held.value, Ok(None)));
            gone.for_each(|(key, _)| forgotten.insert(key));
        }
        self.held.retain(|held| stays(held));
        // Slots may name removed entries now.
        self.held.begin_call();
        self.resolved = false;
    }
}

#[cfg(test)]
mod tests {
    use std::cell::RefCell;
    use std::collections::HashMap;
    use std::rc::Rc;

    use super::*;
    use crate::state::SlotValues;

    /// A host of one value state: values by key, the keys of the current
    /// call by slot; its next `failures_left` calls fail.
    #[derive(Default)]
    struct Host {
        stored: HashMap<Vec<u8>, Vec<u8>>,
        call_keys: Vec<Vec<u8>>,
        failures_left: usize,
        reads: Vec<Vec<u32>>,
        writes: Vec<Vec<(Vec<u8>, Option<Vec<u8>>)>>,
    }

    impl Host {
        fn fail(&mut self) -> Result<(), Error> {
            if self.failures_left == 0 {
                return Ok(());
            }
            self.failures_left -= 1;
            Err(Error::State("host unavailable".into()))
        }
    }

    struct Raw(Rc<RefCell<Host>>);

    impl RawValueState for Raw {
        fn get_many(&self, slots: &[u32]) -> Result<SlotValues, Error> {
            let mut host = self.0.borrow_mut();
            host.fail()?;
            host.reads.push(slots.to_vec());
            let mut values = SlotValues::empty();
            for &slot in slots {
                values.push(host.stored.get(&host.call_keys[slot as usize]).map(Vec::as_slice));
            }
            Ok(values)
        }

        fn set_keyed(&self, keys: &[u8], key_offsets: &[u32], values: &SlotValues) -> Result<(), Error> {
            let mut host = self.0.borrow_mut();
            host.fail()?;
            let mut written = Vec::new();
            for i in 0..key_offsets.len() - 1 {
                let key = keys[key_offsets[i] as usize..key_offsets[i + 1] as usize].to_vec();
                match values.value(i) {
                    Some(value) => host.stored.insert(key.clone(), value.to_vec()),
                    None => host.stored.remove(&key),
                };
                written.push((key, values.value(i).map(<[u8]>::to_vec)));
            }
            written.sort();
            host.writes.push(written);
            Ok(())
        }
    }

    /// A call's keys laid out as the host hands them over (one per event,
    /// slots by first appearance).
    struct Call {
        data: Vec<u8>,
        offsets: Vec<u32>,
        slots: Vec<u32>,
    }

    impl Call {
        fn new(host: &Rc<RefCell<Host>>, keys: &[&str]) -> Self {
            let mut call = Call { data: Vec::new(), offsets: vec![0], slots: Vec::new() };
            let mut distinct: Vec<Vec<u8>> = Vec::new();
            for key in keys {
                call.data.extend_from_slice(key.as_bytes());
                call.offsets.push(call.data.len() as u32);
                let slot = distinct.iter().position(|k| k == key.as_bytes()).unwrap_or_else(|| {
                    distinct.push(key.as_bytes().to_vec());
                    distinct.len() - 1
                });
                call.slots.push(slot as u32);
            }
            host.borrow_mut().call_keys = distinct;
            call
        }

        fn keys(&self) -> CallKeys<'_> {
            CallKeys::of_timers(&self.data, &self.offsets, &self.slots)
        }
    }

    fn store(host: &Rc<RefCell<Host>>) -> ValueStore<u64> {
        ValueStore::new("count", Box::new(Raw(host.clone())), HostStart::Restored, crate::state::RESIDENT_BYTES, false)
    }

    /// Adds one to the count of every event's key, as a keyed count does.
    fn count(store: &mut ValueStore<u64>, call: &Call) -> Result<Vec<u64>, Error> {
        store.begin_call();
        let keys = call.keys();
        call.slots
            .iter()
            .map(|&slot| {
                let held = store.slot(slot, &keys)?;
                let next = held.take()?.unwrap_or(0) + 1;
                held.set(Some(next));
                Ok(next)
            })
            .collect()
    }

    /// A key's value is read from the host once — one read for all the
    /// call's new keys — and reaches the host again, by key and as JSON,
    /// only when written back; unchanged values are not rewritten.
    #[test]
    fn values_are_read_once_and_written_back_by_key() {
        let host = Rc::new(RefCell::new(Host::default()));
        host.borrow_mut().stored.insert(b"b".to_vec(), b"41".to_vec());
        let mut store = store(&host);
        assert_eq!(count(&mut store, &Call::new(&host, &["a", "b", "a"])).unwrap(), [1, 42, 2]);
        assert_eq!(count(&mut store, &Call::new(&host, &["b", "c"])).unwrap(), [43, 1]);
        assert_eq!(host.borrow().reads, [vec![0, 1], vec![1]], "only keys not held are read");
        assert!(host.borrow().writes.is_empty(), "nothing written before the flush");

        store.write_back().unwrap();
        let written = vec![(b"a".to_vec(), Some(b"2".to_vec())), (b"b".to_vec(), Some(b"43".to_vec())), (b"c".to_vec(), Some(b"1".to_vec()))];
        assert_eq!(host.borrow().writes, [written]);

        // Reads without changes, then a cleared key: only it is written.
        store.begin_call();
        let call = Call::new(&host, &["a", "c"]);
        assert_eq!(store.slot(0, &call.keys()).unwrap().value().unwrap(), Some(&2));
        store.slot(1, &call.keys()).unwrap().set(None);
        store.write_back().unwrap();
        assert_eq!(host.borrow().writes[1], [(b"c".to_vec(), None)]);
        assert!(!host.borrow().stored.contains_key(&b"c".to_vec()));
        assert_eq!(host.borrow().reads.len(), 2, "held keys are not read again");
    }

    /// A failed read holds nothing of it — the next call reads the keys
    /// again and sees the host's values — and a failed write-back keeps
    /// every change for the next one.
    #[test]
    fn failed_reads_and_writes_lose_nothing() {
        let host = Rc::new(RefCell::new(Host::default()));
        host.borrow_mut().stored.insert(b"a".to_vec(), b"10".to_vec());
        let mut store = store(&host);
        host.borrow_mut().failures_left = 1;
        let call = Call::new(&host, &["a", "b"]);
        assert!(count(&mut store, &call).is_err());
        assert_eq!(store.len(), 0, "the failed read's keys are not held");
        assert_eq!(count(&mut store, &call).unwrap(), [11, 1]);

        // A malformed call (a slot past its keys) holds nothing either.
        let mut malformed = Call::new(&host, &["a", "c"]);
        malformed.slots[1] = 7;
        store.begin_call();
        let refused = store.slot(0, &malformed.keys()).map(|_| ()).unwrap_err();
        assert!(refused.to_string().contains("order of first appearance"), "{refused}");
        assert_eq!(store.len(), 2, "only a and b, from the successful call");

        host.borrow_mut().failures_left = 1;
        assert!(store.write_back().is_err());
        store.write_back().unwrap();
        assert_eq!(host.borrow().stored[&b"a".to_vec()], b"11");
        assert_eq!(host.borrow().stored[&b"b".to_vec()], b"1");
    }

    /// A value the plugin cannot read fails whoever reads it, not the
    /// call's other keys, and setting it replaces it.
    #[test]
    fn an_unreadable_value_fails_only_its_readers() {
        let host = Rc::new(RefCell::new(Host::default()));
        host.borrow_mut().stored.insert(b"bad".to_vec(), b"\"text\"".to_vec());
        let mut store = store(&host);
        store.begin_call();
        let call = Call::new(&host, &["bad", "good"]);
        let error = store.slot(0, &call.keys()).unwrap().take().unwrap_err();
        assert!(error.to_string().contains("value state `count` holds a value this plugin cannot read"), "{error}");
        assert_eq!(store.slot(1, &call.keys()).unwrap().value().unwrap(), None);
        store.slot(0, &call.keys()).unwrap().set(Some(5));
        store.write_back().unwrap();
        assert_eq!(host.borrow().stored[&b"bad".to_vec()], b"5");
        let outside = store.slot(2, &call.keys()).err().unwrap();
        assert!(outside.to_string().contains("slot 2 is outside the current batch"), "{outside}");
    }

    /// Past the limit only the keys used least recently are forgotten:
    /// the others stay held, unread, and a forgotten one is read again
    /// with the value written back before it went.
    #[test]
    fn eviction_keeps_the_keys_used_most_recently() {
        let host = Rc::new(RefCell::new(Host::default()));
        let mut store = store(&host);
        let names: Vec<Vec<String>> = (0..4).map(|c| (0..10).map(|k| format!("{c}-{k}")).collect()).collect();
        let call = |names: &[&Vec<String>]| {
            let keys: Vec<&str> = names.iter().flat_map(|n| n.iter().map(String::as_str)).collect();
            Call::new(&host, &keys)
        };
        for group in &names {
            count(&mut store, &call(&[group])).unwrap();
        }
        // Group 0 is used again: groups 0 and 3 are now the youngest.
        count(&mut store, &call(&[&names[0]])).unwrap();
        store.write_back().unwrap();
        store.evict_cold(20);
        assert_eq!(store.len(), 20);
        let reads = host.borrow().reads.len();
        assert_eq!(count(&mut store, &call(&[&names[0], &names[3]])).unwrap(), [[3; 10], [2; 10]].concat());
        assert_eq!(host.borrow().reads.len(), reads, "the young keys were held");
        assert_eq!(count(&mut store, &call(&[&names[1]])).unwrap(), [2; 10]);
        assert_eq!(host.borrow().reads.len(), reads + 1, "the cold keys were read again");
    }

    /// Keys cycling through more than the store holds: it keeps those used
    /// least recently, the next to come round, so that a round finds some
    /// held — keeping those used last, it would find none. Counts stay
    /// exact.
    #[test]
    fn keys_cycling_through_more_than_the_store_holds_are_partly_found_held() {
        let host = Rc::new(RefCell::new(Host::default()));
        let mut store = store(&host);
        let names: Vec<String> = (0..40).map(|k| k.to_string()).collect();
        let keys: Vec<&str> = names.iter().map(String::as_str).collect();
        let mut asked_for = Vec::new();
        for round in 1..=6 {
            let read_before: usize = host.borrow().reads.iter().map(Vec::len).sum();
            for call in keys.chunks(5) {
                assert_eq!(count(&mut store, &Call::new(&host, call)).unwrap(), [round; 5], "round {round}");
                // Room for 24 keys, halved past it as `shrink` does.
                if store.len() > 24 {
                    store.write_back().unwrap();
                    store.evict_cold(store.len() / 2);
                }
            }
            asked_for.push(host.borrow().reads.iter().map(Vec::len).sum::<usize>() - read_before);
        }
        assert!(asked_for[2..].iter().all(|&asked| asked <= 30), "of 40 keys a round, 10 and more found held: {asked_for:?}");
    }

    /// On empty state a store reads nothing from the host — until it
    /// forgets values it wrote, which it then reads again; a key it never
    /// wrote is still not asked for.
    #[test]
    fn a_store_started_on_empty_state_reads_only_what_it_evicted() {
        let host = Rc::new(RefCell::new(Host::default()));
        let mut store = ValueStore::new("count", Box::new(Raw(host.clone())), HostStart::Empty, crate::state::RESIDENT_BYTES, false);
        let names: Vec<String> = (0..30).map(|k| k.to_string()).collect();
        let keys: Vec<&str> = names.iter().map(String::as_str).collect();
        for call in keys.chunks(10) {
            assert_eq!(count(&mut store, &Call::new(&host, call)).unwrap(), [1; 10]);
        }
        assert!(host.borrow().reads.is_empty(), "nothing to read");
        store.write_back().unwrap();
        store.evict_cold(10);
        assert_eq!(count(&mut store, &Call::new(&host, &["new", "newer"])).unwrap(), [1, 1]);
        assert!(host.borrow().reads.is_empty(), "new keys are known absent");
        assert_eq!(count(&mut store, &Call::new(&host, &keys)).unwrap(), [2; 30]);
        assert_eq!(host.borrow().reads.len(), 1, "the evicted keys are read again");
        assert_eq!(host.borrow().reads[0].len(), 20, "only those: {:?}", host.borrow().reads);
    }

    /// New keys a store knows absent count as missed too: after eight of
    /// them, one forgotten key coming back is not keys cycling, and the
    /// eviction keeps the keys used last.
    #[test]
    fn new_keys_known_absent_count_against_keys_cycling() {
        let host = Rc::new(RefCell::new(Host::default()));
        let mut store = ValueStore::new("count", Box::new(Raw(host.clone())), HostStart::Empty, crate::state::RESIDENT_BYTES, false);
        count(&mut store, &Call::new(&host, &["back"])).unwrap();
        store.write_back().unwrap();
        store.evict_cold(0);
        let new: Vec<String> = (1..=8).map(|k| format!("new{k}")).collect();
        for key in &new {
            count(&mut store, &Call::new(&host, &[key.as_str()])).unwrap();
        }
        assert!(host.borrow().reads.is_empty(), "new keys are not read");
        assert_eq!(count(&mut store, &Call::new(&host, &["back"])).unwrap(), [2]);
        store.write_back().unwrap();
        store.evict_cold(4);
        let reads = host.borrow().reads.len();
        count(&mut store, &Call::new(&host, &["new8"])).unwrap();
        assert_eq!(host.borrow().reads.len(), reads, "the key used just before is held");
    }

    /// Keys cycling through more than a store holds were all forgotten
    /// once: its record of forgotten keys then spares no read, and goes;
    /// counting goes on exactly from the host's values. A record that
    /// spares reads — of keys never seen before — stays.
    #[test]
    fn a_record_of_forgotten_keys_that_spares_no_read_is_dropped() {
        let host = Rc::new(RefCell::new(Host::default()));
        let mut store = ValueStore::new("count", Box::new(Raw(host.clone())), HostStart::Empty, crate::state::RESIDENT_BYTES, false);
        let names: Vec<String> = (0..30).map(|k| k.to_string()).collect();
        let keys: Vec<&str> = names.iter().map(String::as_str).collect();
        for round in 1..=10 {
            for call in keys.chunks(10) {
                assert_eq!(count(&mut store, &Call::new(&host, call)).unwrap(), [round; 10], "round {round}");
                store.write_back().unwrap();
                store.evict_cold(10);
            }
        }
        assert!(store.forgotten.is_none(), "every key it was asked about was forgotten");

        let mut store = ValueStore::new("count", Box::new(Raw(host.clone())), HostStart::Empty, crate::state::RESIDENT_BYTES, false);
        let reads = host.borrow().reads.len();
        let names: Vec<String> = (0..300).map(|k| format!("new{k}")).collect();
        for call in names.chunks(10) {
            count(&mut store, &Call::new(&host, &call.iter().map(String::as_str).collect::<Vec<_>>())).unwrap();
            store.write_back().unwrap();
            store.evict_cold(10);
        }
        assert!(store.forgotten.is_some(), "new keys are known absent");
        assert_eq!(host.borrow().reads.len(), reads, "and not read");
    }

    struct KeyedCount {
        count: crate::ValueState<u64>,
    }

    impl crate::Operator for KeyedCount {
        fn init(_: &crate::Config) -> Result<Self, Error> {
            Ok(KeyedCount { count: crate::ValueState::new("count") })
        }

        fn process(&mut self, ctx: &mut crate::Context<'_>, event: &crate::Event<'_>) -> Result<(), Error> {
            let n = self.count.update(ctx, |n| n.unwrap_or(0) + 1)?;
            ctx.emit(event.key(), n);
            Ok(())
        }
    }

    /// When its record of forgotten keys alone keeps a store over its
    /// share, the store drops it and asks the host for every key it does
    /// not hold — rather than evicting at every call.
    #[test]
    fn a_record_of_forgotten_keys_over_the_share_is_dropped() {
        let host = Rc::new(RefCell::new(Host::default()));
        // Its record: 8 KiB, a 32nd of 256.
        let mut store = ValueStore::new("count", Box::new(Raw(host.clone())), HostStart::Empty, 256 << 10, false);
        let names: Vec<String> = (0..30).map(|k| k.to_string()).collect();
        let keys: Vec<&str> = names.iter().map(String::as_str).collect();
        for call in keys.chunks(10) {
            count(&mut store, &Call::new(&host, call)).unwrap();
        }
        crate::state::shrink(&mut store, 4 << 10).unwrap();
        assert_eq!(store.len(), 10, "the youngest third stays");
        assert!(store.forgotten.is_none(), "the 8 KiB record went");
        assert!(store.bytes() <= 4 << 10);
        count(&mut store, &Call::new(&host, &["new"])).unwrap();
        assert_eq!(host.borrow().reads.len(), 1, "a new key may be stored now");
    }

    /// A write-back of large values goes to the host in calls of about
    /// [`crate::state::WRITE_BACK_BYTES`], however few entries: its buffers
    /// would otherwise copy much of what is held.
    #[test]
    fn large_values_are_written_back_in_calls_of_bounded_bytes() {
        let host = Rc::new(RefCell::new(Host::default()));
        let resident = crate::state::RESIDENT_BYTES;
        let mut store = ValueStore::<String>::new("text", Box::new(Raw(host.clone())), HostStart::Restored, resident, false);
        let keys: Vec<String> = (0..20).map(|k| format!("k{k}")).collect();
        let call = Call::new(&host, &keys.iter().map(String::as_str).collect::<Vec<_>>());
        store.begin_call();
        for &slot in &call.slots {
            store.slot(slot, &call.keys()).unwrap().set(Some("x".repeat(1000)));
        }
        store.write_back().unwrap();
        let host = host.borrow();
        let sent = |write: &Vec<(Vec<u8>, Option<Vec<u8>>)>| write.iter().map(|(k, v)| k.len() + v.as_ref().map_or(0, Vec::len)).sum::<usize>();
        assert!(host.writes.len() >= 4, "20 kB in calls of 4 KiB: {} calls", host.writes.len());
        assert!(host.writes.iter().all(|write| sent(write) < crate::state::WRITE_BACK_BYTES + 1010), "one value past the bound at most");
        assert_eq!(host.writes.iter().map(Vec::len).sum::<usize>(), 20, "every key written once");
    }

    struct LongText {
        text: crate::ValueState<String>,
    }

    impl crate::Operator for LongText {
        fn init(_: &crate::Config) -> Result<Self, Error> {
            Ok(LongText { text: crate::ValueState::new("text") })
        }

        fn process(&mut self, ctx: &mut crate::Context<'_>, _: &crate::Event<'_>) -> Result<(), Error> {
            self.text.set(ctx, &"x".repeat(1000))
        }
    }

    /// Keys of a kilobyte's value each: twice the test bound's worth.
    const LONG_TEXT_KEYS: usize = 2 * crate::state::RESIDENT_BYTES / 1000;

    /// An instance with `config` that set every one of them, in calls of ten.
    fn long_texts(config: &[(&str, &str)]) -> crate::testing::TestHarness<LongText> {
        use crate::testing::{TestEvent, TestHarness};
        let mut harness = TestHarness::<LongText>::new(config).unwrap();
        for chunk in (0..LONG_TEXT_KEYS).collect::<Vec<_>>().chunks(10) {
            harness.process(chunk.iter().map(|k| TestEvent::new(format!("k{k}"), ""))).unwrap();
        }
        harness
    }

    /// The bound is on bytes, values' own included: a few hundred keys
    /// whose values own a kilobyte each are past it (a count of entries
    /// would let them reach the instance's memory limit first).
    #[test]
    fn values_that_own_much_are_written_back_sooner() {
        let harness = long_texts(&[]);
        assert_eq!(harness.stored_state::<String>("text", "k0").map(|t| t.len()), Some(1000), "written back without a flush");
    }

    /// The bound follows the memory limit the host gives the instance
    /// (an eighth of one as small as 2 MiB): with 2 MiB, the values above
    /// fit.
    #[test]
    fn the_bound_follows_the_instances_memory_limit() {
        assert!(LONG_TEXT_KEYS * 2000 < (2 << 20) / 8, "room for what entries take besides");
        let mut harness = long_texts(&[("weir.memory-limit-mb", "2")]);
        assert_eq!(harness.stored_state::<String>("text", "k0"), None, "held, not written back");
        assert_eq!(harness.state::<String>("text", "k0").map(|t| t.len()), Some(1000), "written back by a flush");
    }

    /// Past the resident bound the values are written back and forgotten
    /// between calls; counting goes on from the host's values.
    #[test]
    fn more_keys_than_the_limit_are_counted_exactly() {
        use crate::testing::{TestEvent, TestHarness};
        // Past the bound: a held count takes more than 16 bytes.
        let keys = 3 * crate::state::RESIDENT_BYTES / 16;
        let mut harness = TestHarness::<KeyedCount>::new(&[]).unwrap();
        for round in 1..=2u64 {
            for chunk in (0..keys).collect::<Vec<_>>().chunks(700) {
                let out = harness.process(chunk.iter().map(|k| TestEvent::new(format!("k{k}"), ""))).unwrap();
                assert!(out.iter().all(|e| e.value_str() == round.to_string()), "round {round}");
            }
        }
        assert_eq!(harness.state::<u64>("count", "k0"), Some(2));
        assert_eq!(harness.state::<u64>("count", format!("k{}", keys - 1)), Some(2));
    }
}
