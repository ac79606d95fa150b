import table from './calibration/table.json' with { type: 'json' };
import { parseCalibrationTable } from './calibration.ts';

/** The table `npm run evaluate` fitted on the training months; validated once at load. */
export const defaultCalibration = parseCalibrationTable(table);
