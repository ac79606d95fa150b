import { spawn } from 'node:child_process';

/**
 * Starts a small process that SIGKILLs process `pid` if it is still its parent `afterMs` later (so
 * it never signals a process that reused the pid), for an exit that may hang (services/main.ts).
 * It ends as soon as the guarded process has exited, told by the end of a pipe from it: the kernel
 * closes the pipe when the process ends. Waiting out its window instead, it outlived every clean
 * exit by 3 s in the service's process group (and a supervisor's cgroup), so a stop that logged
 * 'service stopped' was seen to end seconds later. Returns its pid (undefined: not started).
 * Throws when no process can be started.
 */
export function startExitWatchdog(pid: number, afterMs: number): number | undefined {
  const script = [
    "process.stdin.on('end', () => process.exit(0)).on('error', () => process.exit(0)).resume();",
    `setTimeout(() => { if (process.ppid === ${pid}) process.kill(${pid}, 'SIGKILL'); process.exit(0); }, ${afterMs});`,
  ].join(' ');
  const watchdog = spawn(process.execPath, ['-e', script], { stdio: ['pipe', 'ignore', 'ignore'] });
  // Its start failing later (a spawn error event) leaves the exit unguarded, as no watchdog would.
  watchdog.on('error', () => undefined);
  watchdog.stdin?.on('error', () => undefined);
  watchdog.unref();
  return watchdog.pid;
}
