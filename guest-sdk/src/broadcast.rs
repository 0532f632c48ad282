//! Typed broadcast state, mirrored in the guest.
//!
//! A broadcast map changes only when this very instance writes it (from a
//! broadcast input), so the SDK can keep a complete copy in guest memory:
//! it fetches the entries once per instance and afterwards reads locally,
//! writing through to the host. Reads cost no boundary crossing per event.

use std::collections::HashMap;
use std::marker::PhantomData;

use serde::{Serialize, de::DeserializeOwned};

use crate::state::StateStore;
use crate::{Context, Encode, Error};

/// One broadcast map as the host exposes it.
pub trait RawBroadcastMap {
    fn entries(&self) -> Vec<(Vec<u8>, Vec<u8>)>;
    fn set(&self, key: &[u8], value: &[u8]) -> Result<(), Error>;
    fn remove(&self, key: &[u8]) -> Result<(), Error>;
}

/// A map every subtask of the operator holds in full (rules, configuration,
/// lookup tables), with values of type `V` stored as JSON. Any input may read
/// it; only a broadcast input (`broadcast = [...]` in the job file) may
/// change it, so that all subtasks' copies stay equal.
pub struct BroadcastState<V> {
    name: String,
    _type: PhantomData<fn() -> V>,
}

impl<V: Serialize + DeserializeOwned> BroadcastState<V> {
    /// A handle on the broadcast map called `name`.
    pub fn new(name: impl Into<String>) -> Self {
        let name = name.into();
        crate::schema::declare::<V>(&name, crate::schema::Stored::Broadcast);
        BroadcastState { name, _type: PhantomData }
    }

    /// The value under `key`, if any.
    pub fn get(&self, ctx: &mut Context<'_>, key: impl Encode) -> Result<Option<V>, Error> {
        let (mirror, scratch) = ctx.states.broadcast(&self.name);
        key.encode(scratch);
        mirror.entries.get(scratch.as_slice()).map(|bytes| self.decode(bytes)).transpose()
    }

    /// Stores `value` under `key`. Only allowed while processing an event
    /// from a broadcast input.
    pub fn set(&self, ctx: &mut Context<'_>, key: impl Encode, value: &V) -> Result<(), Error> {
        let mut encoded = Vec::new();
        crate::codec::write_state_json(&mut encoded, value)
            .map_err(|e| Error::State(format!("cannot encode broadcast state `{}`: {e}", self.name)))?;
        let (mirror, scratch) = ctx.states.broadcast(&self.name);
        key.encode(scratch);
        mirror.raw.set(scratch, &encoded)?;
        mirror.entries.insert(scratch.clone(), encoded);
        Ok(())
    }

    /// Removes `key`. Only allowed while processing an event from a
    /// broadcast input.
    pub fn remove(&self, ctx: &mut Context<'_>, key: impl Encode) -> Result<(), Error> {
        let (mirror, scratch) = ctx.states.broadcast(&self.name);
        key.encode(scratch);
        mirror.raw.remove(scratch)?;
        mirror.entries.remove(scratch.as_slice());
        Ok(())
    }

    /// Every entry, in no particular order.
    pub fn entries(&self, ctx: &mut Context<'_>) -> Result<Vec<(Vec<u8>, V)>, Error> {
        let (mirror, _) = ctx.states.broadcast(&self.name);
        mirror.entries.iter().map(|(k, v)| Ok((k.clone(), self.decode(v)?))).collect()
    }

    fn decode(&self, bytes: &[u8]) -> Result<V, Error> {
        crate::state::decode_stored("broadcast state", &self.name, bytes).map_err(Error::State)
    }
}

/// The guest's copy of one broadcast map.
pub(crate) struct Mirror {
    pub name: String,
    pub raw: Box<dyn RawBroadcastMap>,
    pub entries: HashMap<Vec<u8>, Vec<u8>>,
}

impl Mirror {
    pub fn load(name: &str, raw: Box<dyn RawBroadcastMap>) -> Self {
        let entries = raw.entries().into_iter().collect();
        Mirror { name: name.to_owned(), raw, entries }
    }
}

impl StateStore {
    /// The mirror of broadcast map `name` (loaded on first use) and an
    /// emptied scratch buffer for encoding a key.
    fn broadcast(&mut self, name: &str) -> (&mut Mirror, &mut Vec<u8>) {
        let index = match self.mirrors.iter().position(|m| m.name == name) {
            Some(index) => index,
            None => {
                let raw = self.host.open_broadcast(name);
                self.mirrors.push(Mirror::load(name, raw));
                self.mirrors.len() - 1
            }
        };
        self.scratch.clear();
        (&mut self.mirrors[index], &mut self.scratch)
    }
}
