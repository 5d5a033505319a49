// One scenario for @stomp/stompjs against a raftmq node over WebSocket, run in Node
// (stompjs_node.mjs, with the `ws` package) and in a browser page (tests/server/test_stompjs.py).
// It resolves to a report of what it saw; every wait is bounded.
//
// The 16 MiB message goes on a second connection with 10 s heart-beats: stompjs parses a frame
// one byte at a time in JavaScript, which keeps it from sending or checking 1 s heart-beats
// for longer than two intervals on a loaded machine (docs/operations.md says so to users).
globalThis.runScenario = async function runScenario(StompJs, makeSocket, options) {
  const report = await runConnection(StompJs, makeSocket, options.idleMs ?? 2500, 1000, [1 << 20], true);
  if (!report.ok) return report;
  const big = await runConnection(StompJs, makeSocket, 0, 10000, [16 << 20], false);
  report.steps.push(...big.steps.filter((s) => s.startsWith('binary')).map((s) => `${s} (10 s heart-beats)`));
  report.closes.push(...big.closes);
  report.ok = big.ok;
  if (!big.ok) report.error = big.error;
  return report;
};

async function runConnection(StompJs, makeSocket, idleMs, heartbeatMs, bigSizes, everything) {
  const report = { ok: false, steps: [], closes: [] };
  const step = (name, detail) => report.steps.push(detail === undefined ? name : `${name}: ${detail}`);
  const within = (ms, what, promise) => Promise.race([
    promise,
    new Promise((_, reject) => setTimeout(() => reject(new Error(`timed out: ${what}`)), ms)),
  ]);
  const client = new StompJs.Client({
    webSocketFactory: makeSocket,
    heartbeatIncoming: heartbeatMs,
    heartbeatOutgoing: heartbeatMs,
    reconnectDelay: 0,
    debug: () => {},
  });
  client.onWebSocketClose = (event) => report.closes.push(event.code);
  client.onStompError = (frame) => report.steps.push(`STOMP ERROR: ${frame.headers.message}`);
  const connected = new Promise((resolve) => { client.onConnect = resolve; });
  const receipt = (id) => new Promise((resolve) => client.watchForReceipt(id, resolve));
  const suffix = Math.random().toString(36).slice(2);
  try {
    client.activate();
    const frame = await within(10000, 'CONNECTED', connected);
    report.heartBeat = frame.headers['heart-beat'];
    step('connected', frame.headers.version);

    const queue = `/queue/stompjs-${suffix}`;
    const inbox = [];
    let wake = null;
    client.subscribe(queue, (message) => { inbox.push(message); message.ack(); if (wake) wake(); },
      { ack: 'client-individual' });
    const next = async (what) => {
      const deadline = Date.now() + 20000;
      while (inbox.length === 0) {
        if (Date.now() > deadline) throw new Error(`timed out: ${what}`);
        await new Promise((resolve) => { wake = resolve; setTimeout(resolve, 200); });
      }
      return inbox.shift();
    };

    for (let i = 0; i < 3; i++) {
      const id = `r-${i}`;
      const got = receipt(id);
      client.publish({ destination: queue, body: `text ${i}`, headers: { receipt: id } });
      await within(10000, `receipt ${id}`, got);
    }
    const texts = [];
    for (let i = 0; i < 3; i++) texts.push((await next(`text ${i}`)).body);
    step('receipted texts', texts.join('|'));

    for (const size of bigSizes) {
      const body = new Uint8Array(size);
      for (let i = 0; i < size; i++) body[i] = (i * 31 + 7) & 255;
      const id = `big-${size}`;
      const got = receipt(id);
      client.publish({ destination: queue, binaryBody: body, headers: { receipt: id, 'content-type': 'application/octet-stream' } });
      await within(30000, `receipt ${id}`, got);
      const message = await next(`message of ${size} bytes`);
      const back = message.binaryBody;
      let same = back.length === size;
      for (let i = 0; same && i < size; i += 1) same = back[i] === body[i];
      step(`binary ${size}`, same ? 'same bytes' : `differs (${back.length} bytes back)`);
    }

    if (!everything) {
      report.ok = true;
      return report;
    }
    const topic = `/topic/stompjs-${suffix}`;
    const heard = [];
    client.subscribe(topic, (message) => heard.push(`a:${message.body}`));
    client.subscribe(topic, (message) => heard.push(`b:${message.body}`));
    const tid = 'topic-receipt';
    const subscribed = receipt('sub-done');
    client.subscribe(`/queue/stompjs-marker-${suffix}`, () => {}, { receipt: 'sub-done' });
    await within(10000, 'subscriptions', subscribed);
    const got = receipt(tid);
    client.publish({ destination: topic, body: 'to everyone', headers: { receipt: tid } });
    await within(10000, 'topic receipt', got);
    const deadline = Date.now() + 10000;
    while (heard.length < 2 && Date.now() < deadline) await new Promise((resolve) => setTimeout(resolve, 50));
    step('topic', heard.sort().join('|'));

    await new Promise((resolve) => setTimeout(resolve, idleMs));
    step('after idle', client.connected ? 'connected' : 'disconnected');
    const last = receipt('after-idle');
    client.publish({ destination: queue, body: 'still here', headers: { receipt: 'after-idle' } });
    await within(10000, 'receipt after idle', last);
    step('after idle message', (await next('message after idle')).body);
    report.ok = true;
  } catch (error) {
    report.error = String(error && error.message ? error.message : error);
  } finally {
    await client.deactivate();
  }
  return report;
}
