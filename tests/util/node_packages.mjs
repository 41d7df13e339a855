// The npm packages the tests use, pinned in tools/node/package.json and
// installed there (npm ci --prefix tools/node): resolved from that folder,
// whichever test imports them.
import { createRequire } from "node:module";
import { pathToFileURL } from "node:url";

const req = createRequire(new URL("../../tools/node/package.json", import.meta.url));

// The installed package's module; rejects when it is not installed.
export async function importPinned(name) {
  return import(pathToFileURL(req.resolve(name)).href);
}

// The official `openai` client class; exits 77 (ctest: skipped) when the
// package is not installed.
export async function openaiOrSkip() {
  try {
    return (await importPinned("openai")).default;
  } catch {
    console.log("SKIP: the openai npm package is not installed (npm ci --prefix tools/node)");
    process.exit(77);
  }
}
