import { eventStoreContract } from './contract.ts';
import { MemoryEventStore } from './memory.ts';

eventStoreContract('memory', async () => new MemoryEventStore(), { tellsWritten: true });
