// Reads `mi-bench --json` files for the tools beside it: the parsed
// documents in argument order, or a one-line error naming the file and a
// non-zero exit.
import { readFileSync } from 'node:fs';

export function readBenchFiles(tool, files) {
  return files.map((f) => {
    try {
      return JSON.parse(readFileSync(f, 'utf8'));
    } catch (e) {
      console.error(`${tool}: ${f}: ${e.message}`);
      process.exit(1);
    }
  });
}
