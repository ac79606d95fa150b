import { createHash } from 'node:crypto';
import { mkdirSync, readFileSync, renameSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { Abi, Hex } from 'viem';

/**
 * Compiles the test contracts under test/chain/contracts with the solc npm package (our own
 * sources, no downloaded artifacts). Only runtime bytecode is needed: contracts are placed with
 * anvil_setCode, where no constructor runs.
 *
 * The output is kept in node_modules/.cache/test-contracts under the hash of what went in (solc's
 * version, the sources, the settings), so the other processes of a run read it instead of
 * compiling again: ten suites and the drill's two runs each loaded solc and compiled, 2.6-2.8 CPU s
 * apiece at load 8 (about 1 s of it loading solc), 25-30 CPU s of a full run. A change to a source,
 * the settings or solc is another hash, compiled afresh.
 */
export interface CompiledContract {
  abi: Abi;
  runtime: Hex;
}

interface SolcOutput {
  errors?: { severity: string; formattedMessage: string }[];
  contracts: Record<string, Record<string, { abi: Abi; evm: { deployedBytecode: { object: string } } }>>;
}

const require = createRequire(import.meta.url);
const SOURCES = ['TestUsdc.sol', 'TryAggregate.sol'] as const;

let compiled: Promise<Record<string, CompiledContract>> | null = null;

const CACHE_DIR = fileURLToPath(new URL('../../node_modules/.cache/test-contracts/', import.meta.url));

export function compileTestContracts(): Promise<Record<string, CompiledContract>> {
  compiled ??= Promise.resolve().then(() => {
    const sources = Object.fromEntries(
      SOURCES.map((file) => [
        file,
        { content: readFileSync(new URL(`./contracts/${file}`, import.meta.url), 'utf8') },
      ]),
    );
    const input = JSON.stringify({
      language: 'Solidity',
      sources,
      settings: {
        optimizer: { enabled: true, runs: 200 },
        evmVersion: 'cancun',
        outputSelection: { '*': { '*': ['abi', 'evm.deployedBytecode.object'] } },
      },
    });
    const solcVersion = (require('solc/package.json') as { version: string }).version;
    const key = createHash('sha256').update(solcVersion).update('\0').update(input).digest('hex');
    const cached = join(CACHE_DIR, `${key}.json`);
    try {
      return JSON.parse(readFileSync(cached, 'utf8')) as Record<string, CompiledContract>;
    } catch {
      // Not compiled yet with these inputs (or a file cut short): compile.
    }
    const solc = require('solc') as { compile(input: string): string };
    const output = JSON.parse(solc.compile(input)) as SolcOutput;
    const errors = (output.errors ?? []).filter((e) => e.severity === 'error');
    if (errors.length > 0) throw new Error(errors.map((e) => e.formattedMessage).join('\n'));
    const result: Record<string, CompiledContract> = {};
    for (const file of Object.values(output.contracts)) {
      for (const [name, contract] of Object.entries(file)) {
        result[name] = { abi: contract.abi, runtime: `0x${contract.evm.deployedBytecode.object}` };
      }
    }
    // Written whole and renamed: a process compiling at the same moment reads one or the other.
    mkdirSync(CACHE_DIR, { recursive: true });
    const partial = `${cached}.${process.pid}.tmp`;
    writeFileSync(partial, JSON.stringify(result));
    renameSync(partial, cached);
    return result;
  });
  return compiled;
}
