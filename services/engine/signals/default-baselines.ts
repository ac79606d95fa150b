import { BaselinesTableSchema } from '../../../contracts/signals.ts';
import table from './calibration/baselines.json' with { type: 'json' };

/** The free baselines `npm run evaluate` measured on the test months; validated once at load. */
export const defaultBaselines = BaselinesTableSchema.parse(table);
