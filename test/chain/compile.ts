import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import type { Abi, Hex } from 'viem';

/**
 * Compiles the test contracts under test/chain/contracts with the solc npm package (our own
 * sources, no downloaded artifacts). Only runtime bytecode is needed: contracts are placed with
 * anvil_setCode, where no constructor runs.
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

export function compileTestContracts(): Promise<Record<string, CompiledContract>> {
  compiled ??= Promise.resolve().then(() => {
    const solc = require('solc') as { compile(input: string): string };
    const sources = Object.fromEntries(
      SOURCES.map((file) => [
        file,
        { content: readFileSync(new URL(`./contracts/${file}`, import.meta.url), 'utf8') },
      ]),
    );
    const input = {
      language: 'Solidity',
      sources,
      settings: {
        optimizer: { enabled: true, runs: 200 },
        evmVersion: 'cancun',
        outputSelection: { '*': { '*': ['abi', 'evm.deployedBytecode.object'] } },
      },
    };
    const output = JSON.parse(solc.compile(JSON.stringify(input))) as SolcOutput;
    const errors = (output.errors ?? []).filter((e) => e.severity === 'error');
    if (errors.length > 0) throw new Error(errors.map((e) => e.formattedMessage).join('\n'));
    const result: Record<string, CompiledContract> = {};
    for (const file of Object.values(output.contracts)) {
      for (const [name, contract] of Object.entries(file)) {
        result[name] = { abi: contract.abi, runtime: `0x${contract.evm.deployedBytecode.object}` };
      }
    }
    return result;
  });
  return compiled;
}
