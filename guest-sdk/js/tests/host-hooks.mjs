// Module hooks for the SDK's unit tests under Node: the host's WIT imports
// (`weir:operator/...`) resolve to a stand-in, and weir-sdk.js, which has
// no package.json to say so, loads as an ES module.

const STAND_IN = new URL("./host-stand-in.mjs", import.meta.url).href;

export async function resolve(specifier, context, next) {
  if (specifier.startsWith("weir:operator/")) return { url: STAND_IN, shortCircuit: true };
  return next(specifier, context);
}

export async function load(url, context, next) {
  if (url.endsWith("/weir-sdk.js")) return next(url, { ...context, format: "module" });
  return next(url, context);
}
