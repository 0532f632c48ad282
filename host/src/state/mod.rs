//! Keyed state owned by the host.
//!
//! Every operator subtask has its own [`KeyedStateBackend`] holding the
//! state of the keys whose key groups ([`key_group`]) are assigned to it.
//! Plugins reach it only through the `state` WIT interface, scoped to the
//! keys of the batch they are processing. State is addressed by a
//! [`StateId`], interned from the name the plugin gives it.

mod key_group;
mod memory;
mod timers;

pub use key_group::{
    DEFAULT_MAX_PARALLELISM, KeyGroupRange, key_group_for, key_group_range, key_hash, subtask_for_key_group,
};
pub use memory::MemoryBackend;
pub use timers::{FiredTimer, TimeDomain, TimerService};


/// A state of one operator, by index into its [`StateRegistry`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct StateId(pub u32);

/// The names of an operator's states, interned to [`StateId`]s in order of
/// first use.
#[derive(Debug, Default, Clone)]
pub struct StateRegistry {
    names: Vec<String>,
}

impl StateRegistry {
    /// The id of state `name`, registering it on first use.
    pub fn intern(&mut self, name: &str) -> StateId {
        let index = match self.names.iter().position(|n| n == name) {
            Some(index) => index,
            None => {
                self.names.push(name.to_owned());
                self.names.len() - 1
            }
        };
        StateId(index as u32)
    }

    /// The name of `id`.
    pub fn name(&self, id: StateId) -> &str {
        &self.names[id.0 as usize]
    }

    /// All registered names, by id.
    pub fn names(&self) -> &[String] {
        &self.names
    }
}

/// A key with its in-memory hash, computed once per batch for the reads and
/// writes of that key. (Not the key-group hash: this one may change.)
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HashedKey<'a> {
    pub key: &'a [u8],
    pub hash: u64,
}

impl<'a> HashedKey<'a> {
    pub fn new(key: &'a [u8]) -> Self {
        HashedKey { key, hash: key_hash(key) }
    }
}

/// Storage for the keyed value state of one operator subtask.
pub trait KeyedStateBackend: Send {
    /// The value of `state` for `key`.
    fn get(&self, state: StateId, key: HashedKey<'_>) -> Option<&[u8]>;
    /// Sets the value of `state` for `key`.
    fn put(&mut self, state: StateId, key: HashedKey<'_>, value: &[u8]);
    /// Removes the value of `state` for `key`.
    fn delete(&mut self, state: StateId, key: HashedKey<'_>);
    /// How many (state, key) entries are stored.
    fn len(&self) -> usize;
    /// Whether no entry is stored.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Every entry of `state`, in no particular order.
    fn entries(&self, state: StateId) -> Box<dyn Iterator<Item = (&[u8], &[u8])> + '_>;
}
