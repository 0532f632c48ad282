// Module hooks for the SDK's unit tests under Node: the host's WIT imports
// (`weir:operator/...`) resolve to a stand-in, `weir-sdk` (as the example
// plugins import it) to the SDK, and the SDK and the plugins, which have no
// package.json to say so, load as ES modules.

const STAND_IN = new URL("./host-stand-in.mjs", import.meta.url).href;
const SDK = new URL("../weir-sdk.js", import.meta.url).href;
const PLUGINS = new URL("../../../plugins/js/", import.meta.url).href;

export async function resolve(specifier, context, next) {
  if (specifier.startsWith("weir:operator/")) return { url: STAND_IN, shortCircuit: true };
  if (specifier === "weir-sdk") return { url: SDK, shortCircuit: true };
  return next(specifier, context);
}

export async function load(url, context, next) {
  if (url === SDK || (url.startsWith(PLUGINS) && url.endsWith(".js"))) return next(url, { ...context, format: "module" });
  return next(url, context);
}
