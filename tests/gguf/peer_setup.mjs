// What the llama.cpp peer tests of this folder start with: the repository
// root, the peer runner and the converter, or exit 77 (ctest's skip) with
// one line when node-llama-cpp or the tools cannot be loaded.
import path from "node:path";

export const src = path.resolve(path.dirname(new URL(import.meta.url).pathname), "../..");

/* { runPeer, convert, quantizers } from tools/peer, node-llama-cpp loaded */
export async function peerOrSkip() {
  try {
    const { runPeer } = await import(path.join(src, "tools/peer/peer_run.mjs"));
    const { convert, quantizers } = await import(path.join(src, "tools/peer/hf2gguf.mjs"));
    const { importDep } = await import(path.join(src, "tools/peer/deps.mjs"));
    await importDep("node-llama-cpp");
    return { runPeer, convert, quantizers };
  } catch (e) {
    console.log(`SKIP: ${e.message.split("\n")[0]}`);
    process.exit(77);
  }
}
