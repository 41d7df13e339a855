// Resolve npm packages from tools/node/node_modules (installed with
// `npm ci --prefix tools/node --omit=optional`), wherever the script runs from.
import { createRequire } from "node:module";
import { pathToFileURL } from "node:url";

const req = createRequire(new URL("../node/package.json", import.meta.url));

export async function importDep(name) {
  let resolved;
  try {
    resolved = req.resolve(name);
  } catch {
    throw new Error(`cannot find npm package ${name}: run 'npm ci --prefix tools/node --omit=optional' in the source tree`);
  }
  return import(pathToFileURL(resolved).href);
}
