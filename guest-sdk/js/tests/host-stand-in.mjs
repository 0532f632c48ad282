// What the SDK imports from the host, for unit tests that never reach it:
// any use fails the test.

export class ValueState {
  constructor() {
    throw new Error("the unit tests have no host state");
  }
}

export class MapState extends ValueState {}

export class BroadcastMap extends ValueState {}

export function update() {
  throw new Error("the unit tests have no host timers");
}
