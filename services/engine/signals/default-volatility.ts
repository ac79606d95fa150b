import table from './calibration/volatility.json' with { type: 'json' };
import { parseVolatilityTable } from './volatility.ts';

/** The volatility model `npm run evaluate` fitted on the training months; validated once at load. */
export const defaultVolatility = parseVolatilityTable(table);
