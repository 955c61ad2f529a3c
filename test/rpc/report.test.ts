// What a transfer reports from UCX's description of it (core/rpc/movers/report.ts): the
// description is read through the readings the caller gives (a connection's TransferReports).
import { describe, expect, it } from 'vitest';
import { plannedInfo, reportReceived, reportSent, type ProtocolReadings } from '../../core/rpc/movers/report.ts';
import type { TransferPlan } from '../../core/rpc/movers/plan.ts';
import { TransferReports } from '../../core/rpc/connection/reports.ts';

const TCP_EAGER = '{cpml|proto|init} tag_send from host memory length 8193 eager zero-copy copy-out tcp/lo 10.2 MB/s 767.92 us';
const plan = { mover: 'tag', path: 'tcp', bytes: 8193, from: 'host', to: 'host' } as unknown as TransferPlan;

describe('transfer reports from UCX descriptions', () => {
  it('a sender reads its description through the given readings: a connection reads each description once', () => {
    const reports = new TransferReports(() => 1000);
    let reads = 0;
    // The connection's readings, counting the reads they make.
    const read: ProtocolReadings = { reading: (text, parse) => reports.reading(text, (t) => { reads += 1; return parse(t); }) };
    for (let i = 0; i < 5; i += 1) {
      const info = plannedInfo('x', plan);
      reportSent([info], plan, { protocol: TCP_EAGER }, false, 'peer:1', read);
      expect(info).toMatchObject({ path: 'tcp', source: 'ucx', protocol: TCP_EAGER });
    }
    const received = reportReceived('x', plan, { protocol: TCP_EAGER }, read);
    expect(received).toMatchObject({ path: 'tcp', source: 'ucx' });
    expect(reads).toBe(1);
  });

  it('without readings each description is parsed as it comes, to the same report', () => {
    const info = plannedInfo('x', plan);
    reportSent([info], plan, { protocol: TCP_EAGER }, false, 'peer:1');
    expect(info).toMatchObject({ path: 'tcp', source: 'ucx', protocol: TCP_EAGER });
    const unread = plannedInfo('x', plan);
    reportSent([unread], plan, { protocol: '<no debug info>' }, false, 'peer:1');
    expect(unread).toMatchObject({ path: 'tcp', source: 'predicted' });
  });
});
