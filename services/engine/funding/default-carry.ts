import table from './carry.json' with { type: 'json' };
import { parseCarryTable } from './carry.ts';

/** The carry model `npm run evaluate` fitted on the funding history's training months. */
export const defaultCarry = parseCarryTable(table);
