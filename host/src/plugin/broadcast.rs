//! Host side of the `broadcast-state` interface: maps every subtask holds in
//! full, writable only while a batch from a broadcast input is processed.

use std::collections::BTreeMap;

use wasmtime::component::{HasData, Resource, ResourceTable};

use super::bindings::weir::operator::broadcast_state::{Host, HostBroadcastMap};
use super::bindings::weir::operator::types::StateError;
use crate::state::{RecordReader, RecordWriter, StateId, StateRegistry};

/// The host's representation of a guest's `broadcast-map` resource.
#[derive(Debug, Clone, Copy)]
pub struct BroadcastMapHandle {
    map: StateId,
}

/// The broadcast maps of one operator instance, by name.
#[derive(Debug, Default)]
pub struct BroadcastMaps {
    pub registry: StateRegistry,
    pub maps: Vec<BTreeMap<Vec<u8>, Vec<u8>>>,
}

impl BroadcastMaps {
    fn map_mut(&mut self, id: StateId) -> &mut BTreeMap<Vec<u8>, Vec<u8>> {
        let index = id.0 as usize;
        if self.maps.len() <= index {
            self.maps.resize_with(index + 1, BTreeMap::new);
        }
        &mut self.maps[index]
    }

    fn map(&self, id: StateId) -> Option<&BTreeMap<Vec<u8>, Vec<u8>>> {
        self.maps.get(id.0 as usize)
    }

    /// Writes every map: a u32 count, then each map's name, a u32 count of
    /// entries and each key and value (the layout checkpoint meta files and
    /// savepoints share).
    pub fn encode(&self, out: &mut RecordWriter) {
        out.u32(self.registry.names().len() as u32);
        for (index, name) in self.registry.names().iter().enumerate() {
            out.bytes(name.as_bytes());
            let map = self.maps.get(index);
            out.u32(map.map_or(0, |m| m.len() as u32));
            for (key, value) in map.into_iter().flatten() {
                out.bytes(key);
                out.bytes(value);
            }
        }
    }

    /// Reads what [`BroadcastMaps::encode`] wrote.
    pub fn decode(input: &mut RecordReader<'_>) -> Result<Self, crate::state::StateError> {
        let mut broadcast = BroadcastMaps::default();
        for _ in 0..input.u32()? {
            let id = broadcast.registry.intern(&input.string()?);
            let map = broadcast.map_mut(id);
            for _ in 0..input.u32()? {
                let key = input.bytes()?.to_vec();
                map.insert(key, input.bytes()?.to_vec());
            }
        }
        Ok(broadcast)
    }
}

/// What the broadcast-state host functions see of a plugin instance's store.
pub struct BroadcastView<'a> {
    pub table: &'a mut ResourceTable,
    pub maps: &'a mut BroadcastMaps,
    /// Whether the current call processes a batch from a broadcast input.
    pub writable: bool,
}

/// Marker for [`HasData`]: `broadcast-state` is implemented on a [`BroadcastView`].
pub struct BroadcastAccess;

impl HasData for BroadcastAccess {
    type Data<'a> = BroadcastView<'a>;
}

impl BroadcastView<'_> {
    fn handle(&self, resource: &Resource<BroadcastMapHandle>) -> StateId {
        self.table.get(resource).expect("broadcast-map handle is in the resource table").map
    }

    fn writable_map(&mut self, resource: &Resource<BroadcastMapHandle>) -> Result<&mut BTreeMap<Vec<u8>, Vec<u8>>, StateError> {
        if !self.writable {
            return Err(StateError::NotBroadcastInput);
        }
        let id = self.handle(resource);
        Ok(self.maps.map_mut(id))
    }
}

impl Host for BroadcastView<'_> {}

impl HostBroadcastMap for BroadcastView<'_> {
    fn new(&mut self, name: String) -> wasmtime::Result<Resource<BroadcastMapHandle>> {
        let map = self.maps.registry.register("", &name)?;
        Ok(self.table.push(BroadcastMapHandle { map })?)
    }

    fn get(&mut self, resource: Resource<BroadcastMapHandle>, key: Vec<u8>) -> Option<Vec<u8>> {
        let id = self.handle(&resource);
        self.maps.map(id)?.get(&key).cloned()
    }

    fn entries(&mut self, resource: Resource<BroadcastMapHandle>) -> Vec<(Vec<u8>, Vec<u8>)> {
        let id = self.handle(&resource);
        self.maps.map(id).map(|m| m.iter().map(|(k, v)| (k.clone(), v.clone())).collect()).unwrap_or_default()
    }

    fn set(&mut self, resource: Resource<BroadcastMapHandle>, key: Vec<u8>, value: Vec<u8>) -> Result<(), StateError> {
        self.writable_map(&resource)?.insert(key, value);
        Ok(())
    }

    fn remove(&mut self, resource: Resource<BroadcastMapHandle>, key: Vec<u8>) -> Result<(), StateError> {
        self.writable_map(&resource)?.remove(&key);
        Ok(())
    }

    fn drop(&mut self, resource: Resource<BroadcastMapHandle>) -> wasmtime::Result<()> {
        self.table.delete(resource)?;
        Ok(())
    }
}
