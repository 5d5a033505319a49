// @stomp/stompjs 7 in Node with `ws`: node stompjs_node.mjs ws://HOST:PORT/ws [idle ms]
// Prints the scenario's report (scenario.js) as one JSON line.
import * as StompJs from '@stomp/stompjs';
import WebSocket from 'ws';
import './scenario.js';

const url = process.argv[2];
const idleMs = Number(process.argv[3] ?? 2500);
const report = await globalThis.runScenario(
  StompJs, () => new WebSocket(url, ['v12.stomp', 'v11.stomp', 'v10.stomp'], { maxPayload: 64 << 20 }), { idleMs });
console.log(JSON.stringify(report));
process.exit(report.ok ? 0 : 1);
