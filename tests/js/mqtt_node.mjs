// MQTT.js 5 in Node: node mqtt_node.mjs URL VERSION (mqtt://HOST:PORT, or ws://HOST:PORT/mqtt;
// VERSION 4 or 5). Prints the scenario's report (mqtt_scenario.js) as one JSON line.
import mqtt from 'mqtt';
import './mqtt_scenario.js';

const report = await globalThis.runMqttScenario(mqtt, process.argv[2], Number(process.argv[3]));
console.log(JSON.stringify(report));
process.exit(report.ok ? 0 : 1);
