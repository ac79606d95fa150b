import { spawn } from 'node:child_process';

/**
 * Starts a small process that SIGKILLs process `pid` if it is still its parent `afterMs` later (so
 * it never signals a process that reused the pid), for an exit that may hang (services/main.ts).
 * It ends as soon as the guarded process has exited, told by the end of a pipe from it: the kernel
 * closes the pipe when the process ends. Waiting out its window instead, it outlived every clean
 * exit by 3 s in the service's process group (and a supervisor's cgroup), so a stop that logged
 * 'service stopped' was seen to end seconds later. Returns its pid (undefined: not started).
 * Throws when no process can be started.
 *
 * `line`: the fields of the pino line (level fatal, its time the kill's) it writes to the guarded
 * process's stdout, which it shares, just before the kill, so that an exit ended by it says so
 * and what the process still held when it called exit: from the log alone, a SIGKILL of this
 * watchdog and one of the shutdown timeout looked the same.
 */
export function startExitWatchdog(
  pid: number,
  afterMs: number,
  line?: Record<string, unknown>,
): number | undefined {
  // A full pipe (the descriptor is shared, and non-blocking) is tried again for up to 1 s.
  const say =
    line === undefined
      ? ''
      : `const text = JSON.stringify({ level: 60, time: Date.now(), ...${JSON.stringify(line)} }) + '\\n';` +
        ' for (let at = 0, tries = 0; at < Buffer.byteLength(text) && tries < 1000; tries++) {' +
        " try { at += require('node:fs').writeSync(1, Buffer.from(text).subarray(at)); }" +
        ' catch { Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 1); } }';
  const script = [
    "process.stdin.on('end', () => process.exit(0)).on('error', () => process.exit(0)).resume();",
    `setTimeout(() => { if (process.ppid === ${pid}) { ${say} process.kill(${pid}, 'SIGKILL'); } process.exit(0); }, ${afterMs});`,
  ].join(' ');
  const watchdog = spawn(process.execPath, ['-e', script], {
    stdio: ['pipe', line === undefined ? 'ignore' : 'inherit', 'ignore'],
  });
  // Its start failing later (a spawn error event) leaves the exit unguarded, as no watchdog would.
  watchdog.on('error', () => undefined);
  watchdog.stdin?.on('error', () => undefined);
  watchdog.unref();
  return watchdog.pid;
}

/**
 * What keeps the event loop of this process busy, by kind (Node's names: TCPSocketWrap,
 * FSReqCallback, Timeout...), for a line that says what a stop or an exit was still holding.
 */
export function openResources(): Record<string, number> {
  const counts: Record<string, number> = {};
  for (const kind of process.getActiveResourcesInfo()) counts[kind] = (counts[kind] ?? 0) + 1;
  return counts;
}
