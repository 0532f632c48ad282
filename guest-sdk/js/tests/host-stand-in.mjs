// What the SDK imports from the host, for its unit tests under Node: keyed
// value and map state in memory, addressed by slot as the host does — slot
// `s` is key `callKeys[s]` of the call under way, which a test sets with
// `beginCall` — and timers recorded. Broadcast state is not stood in for:
// any use fails the test.

const textDecoder = new TextDecoder();

/** The keys of the call under way, by slot, and the stored state. */
const host = { callKeys: [], values: new Map(), maps: new Map(), timers: [], opened: [], mapGets: 0, mapGetManys: 0, mapListings: 0, mapKeyedWrites: 0 };

/** Starts a call whose keys are `keys` (strings), slot by slot. */
export function beginCall(keys) {
  host.callKeys = keys;
}

/** Forgets all state and timers (a new test). */
export function resetHost() {
  Object.assign(host, { callKeys: [], values: new Map(), maps: new Map(), timers: [], opened: [], mapGets: 0, mapGetManys: 0, mapListings: 0, mapKeyedWrites: 0 });
}

/** How many map-state reads the plugin made: `{ gets, getManys, listings }` (`entries` calls). */
export function mapReads() {
  return { gets: host.mapGets, getManys: host.mapGetManys, listings: host.mapListings };
}

/** How many map entries the plugin wrote by key (`set-keyed`). */
export function mapKeyedWrites() {
  return host.mapKeyedWrites;
}

/** The states opened with a time-to-live, as `{ kind, name, ttl }`, in order. */
export function openedExpiring() {
  return host.opened;
}

/** Map state `name` as `{ key: { subKey: JSON text } }`, to check what a plugin stored. */
export function storedMap(name) {
  const out = {};
  for (const [key, entries] of host.maps.get(name) ?? []) {
    out[key] = Object.fromEntries([...entries].map(([subKey, value]) => [subKey, textDecoder.decode(value)]));
  }
  return out;
}

/** The stored bytes of value state `name` for `key`, or undefined. */
export function storedValue(name, key) {
  return host.values.get(name)?.get(key);
}

function keyOf(slot) {
  if (slot >= host.callKeys.length) throw new Error(`slot ${slot} is outside the current batch`);
  return host.callKeys[slot];
}

function valueAt(values, i) {
  return values.present[i] ? values.data.slice(values.offsets[i], values.offsets[i + 1]) : null;
}

function flat(parts) {
  const offsets = [0];
  let length = 0;
  for (const part of parts) offsets.push((length += part.length));
  const data = new Uint8Array(length);
  parts.forEach((part, i) => data.set(part, offsets[i]));
  return { data, offsets: Uint32Array.from(offsets) };
}

// Sub-keys are held as strings of one char per byte: their order is the bytes'.
const subKeyText = (bytes) => String.fromCharCode(...bytes);
const subKeyBytes = (text) => Uint8Array.from(text, (c) => c.charCodeAt(0));

export class ValueState {
  constructor(name) {
    if (!host.values.has(name)) host.values.set(name, new Map());
    this.store = host.values.get(name);
  }

  /** Recorded; its values do not expire here (the host's tests expire them). */
  static openExpiring(name, ttl) {
    host.opened.push({ kind: "value", name, ttl });
    return new ValueState(name);
  }

  getAll() {
    const found = host.callKeys.map((key) => this.store.get(key) ?? null);
    const { data, offsets } = flat(found.map((value) => value ?? new Uint8Array(0)));
    return { present: found.map((value) => value !== null), data, offsets };
  }

  setMany(slots, values) {
    slots.forEach((slot, i) => {
      const value = valueAt(values, i);
      if (value === null) this.store.delete(keyOf(slot));
      else this.store.set(keyOf(slot), value);
    });
  }
}

export class MapState {
  constructor(name) {
    if (!host.maps.has(name)) host.maps.set(name, new Map());
    this.store = host.maps.get(name);
  }

  static openExpiring(name, ttl) {
    host.opened.push({ kind: "map", name, ttl });
    return new MapState(name);
  }

  entriesOf(slot) {
    const key = keyOf(slot);
    if (!this.store.has(key)) this.store.set(key, new Map());
    return this.store.get(key);
  }

  get(slot, subKey) {
    host.mapGets += 1;
    return this.entriesOf(slot).get(subKeyText(subKey));
  }

  getMany(slots, subKeys, subKeyOffsets) {
    host.mapGetManys += 1;
    const values = Array.from(slots, (slot, i) => this.entriesOf(slot).get(subKeyText(subKeys.slice(subKeyOffsets[i], subKeyOffsets[i + 1]))));
    const { data, offsets } = flat(values.map((value) => value ?? new Uint8Array(0)));
    return { present: values.map((value) => value !== undefined), data, offsets };
  }

  setMany(slots, subKeys, subKeyOffsets, values) {
    slots.forEach((slot, i) => {
      const subKey = subKeyText(subKeys.slice(subKeyOffsets[i], subKeyOffsets[i + 1]));
      const value = valueAt(values, i);
      if (value === null) this.entriesOf(slot).delete(subKey);
      else this.entriesOf(slot).set(subKey, value);
    });
  }

  /** By key: `keys` are UTF-8 here, as the tests' keys are strings. */
  setKeyed(keys, keyOffsets, subKeys, subKeyOffsets, values) {
    for (let i = 0; i + 1 < keyOffsets.length; i++) {
      host.mapKeyedWrites += 1;
      const key = textDecoder.decode(keys.slice(keyOffsets[i], keyOffsets[i + 1]));
      if (!this.store.has(key)) this.store.set(key, new Map());
      const subKey = subKeyText(subKeys.slice(subKeyOffsets[i], subKeyOffsets[i + 1]));
      const value = valueAt(values, i);
      if (value === null) this.store.get(key).delete(subKey);
      else this.store.get(key).set(subKey, value);
    }
  }

  entries(slot, after, limit) {
    host.mapListings += 1;
    const from = after === undefined ? null : subKeyText(after);
    const sorted = [...this.entriesOf(slot)].filter(([k]) => from === null || k > from).sort(([a], [b]) => (a < b ? -1 : 1));
    const page = sorted.slice(0, Math.min(limit, 4096));
    const subKeys = flat(page.map(([k]) => subKeyBytes(k)));
    const values = flat(page.map(([, v]) => v));
    return { subKeys: subKeys.data, subKeyOffsets: subKeys.offsets, data: values.data, offsets: values.offsets, more: sorted.length > page.length };
  }

  clear(slots) {
    for (const slot of slots) this.entriesOf(slot).clear();
  }
}

export class BroadcastMap {
  constructor() {
    throw new Error("the unit tests have no host broadcast state");
  }
}

export function update(changes) {
  host.timers.push(...changes);
}
