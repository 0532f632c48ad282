// Lifts the JavaScript engine's own 32 MiB cap on its garbage-collected heap,
// so that a JavaScript plugin is bounded by its instance's memory limit
// (`memory_limit_mb`), as plugins in other languages are.
//
//   node scripts/patch-js-engine.mjs COMPONENTIZE_JS_LIB_DIR OUT_DIR
//
// componentize-js runs StarlingMonkey, which creates its SpiderMonkey context
// with `JS_NewContext(JS::DefaultHeapMaxBytes)`: SpiderMonkey's default
// `JSGC_MAX_BYTES` of 32 MiB, meant for embedders to raise. Past it the
// engine throws "out of memory" whatever room the instance has: a window
// operator failed now and then over 1 000 keys, and any plugin that keeps
// objects between calls (held state, a cache) failed once they neared
// ~25 MiB, with 400 MiB of its 512 unused. The plugin cannot raise the cap
// (no JavaScript API does), so this script writes copies of the engines
// with the constant replaced by 0xFFFFFFFF (SpiderMonkey's "no cap", what
// browsers use): the heap then grows until the instance's memory limit
// refuses, and the host names the limit in the error. The constant is read
// when componentize-js initialises the engine (Wizer), so the cap a plugin
// runs with is the one of the engine it was built from.
//
// The site of the constant, found in the engines of componentize-js 0.23.0:
// in the debug build (`starlingmonkey_embedding.debug.wasm`, with names)
// `api::Engine::Engine` calls `js::NewContext(33554432, nullptr)`; the AOT
// engine keeps that call (`i32.const 33554432; i32.const 0; call`), the plain
// one inlines it and stores the constant into the collector's tunables
// (`i32.const 33554432; i32.store`). Each is the only such site in its file.
// Another version of componentize-js has other engines: the checksums below
// stop the build until the sites are found again (wasm-dis from the `binaryen`
// package that componentize-js installs prints the debug build).
//
// Idempotent: a copy already patched is left as it is.

import { createHash } from "node:crypto";
import { existsSync, mkdirSync, readFileSync, renameSync, writeFileSync } from "node:fs";
import path from "node:path";

/** `i32.const 33554432` (32 MiB, a 4-byte LEB128) and its replacement of
 *  the same length, `i32.const -1` (0xFFFFFFFF as the C++ `uint32_t`). */
const CAP = Buffer.from([0x41, 0x80, 0x80, 0x80, 0x10]);
const NO_CAP = Buffer.from([0x41, 0xff, 0xff, 0xff, 0x7f]);

const ENGINES = [
  {
    file: "starlingmonkey_embedding_weval.wasm",
    sha256: "a6b0b3e86a05dad31481652cc1261c900ccd8558f5f88a7bc3e7b8a681391f53",
    offset: 2720145,
  },
  {
    file: "starlingmonkey_embedding.wasm",
    sha256: "6094cd93d966f9bec9b01332db6e0eedbaf22f60b745c9f823f21e33cbd4d365",
    offset: 2292714,
  },
];

function sha256(bytes) {
  return createHash("sha256").update(bytes).digest("hex");
}

function patched(bytes, { offset }) {
  const copy = Buffer.from(bytes);
  NO_CAP.copy(copy, offset);
  return copy;
}

function patchEngine(libDir, outDir, engine) {
  const source = path.join(libDir, engine.file);
  const bytes = readFileSync(source);
  const digest = sha256(bytes);
  if (digest !== engine.sha256 || !bytes.subarray(engine.offset, engine.offset + CAP.length).equals(CAP)) {
    throw new Error(
      `${source} is not the engine scripts/patch-js-engine.mjs knows (sha256 ${digest}, expected ${engine.sha256}): ` +
        "another componentize-js version? Find its heap cap again as the script's header says, or pin " +
        "COMPONENTIZE_JS_VERSION in scripts/js-tools.sh back",
    );
  }
  const target = path.join(outDir, engine.file);
  const wanted = patched(bytes, engine);
  if (existsSync(target) && readFileSync(target).equals(wanted)) return false;
  const temporary = `${target}.${process.pid}.tmp`;
  writeFileSync(temporary, wanted);
  renameSync(temporary, target);
  return true;
}

const [libDir, outDir] = process.argv.slice(2);
if (!libDir || !outDir) {
  console.error("usage: node scripts/patch-js-engine.mjs COMPONENTIZE_JS_LIB_DIR OUT_DIR");
  process.exit(2);
}
mkdirSync(outDir, { recursive: true });
try {
  for (const engine of ENGINES) {
    if (patchEngine(libDir, outDir, engine)) {
      console.error(`patch-js-engine: wrote ${path.join(outDir, engine.file)} (no 32 MiB heap cap)`);
    }
  }
} catch (error) {
  console.error(`patch-js-engine: ${error.message}`);
  process.exit(1);
}
