// Mapping UCX's request descriptions to path classes (movers/protocol.ts). The host samples are
// verbatim from UCX 1.22 on the CPU box; the GPU ones follow the format of UCX's proto v2 query
// functions (rndv_mtype.inl, proto_rndv.c) and are checked for real by test/gpu/paths.test.ts.
import { describe, expect, it } from 'vitest';
import { parseProtocol, pathOfProtocol } from '../../core/rpc/movers/protocol.ts';

const OBSERVED = {
  tcpEager: '{cpml|proto|init} tag_send from host memory length 8193 eager zero-copy copy-out tcp/lo 10.2 MB/s 767.92 us',
  tcpRndv: '{cpml|proto|cb|init|rk_use} rndv_send from host memory length 1048576 zero-copy tcp/lo 11.9 MB/s 84084.00 us',
  tcpRndvEstimate: '{proto|cb|init|rk_use} tag_send from host memory length 1048576 rendezvous zero-copy tcp/lo 12.0 MB/s 83463.49 us',
  shmShort: '{cpml|proto} tag_send from host memory length 92 eager short sysv/memory 670.9 MB/s 0.13 us',
  shmRndv: '{cpml|proto|cb|init|rk_use} rndv_send from host memory length 8388608 fragmented copy-in copy-out sysv/memory 6867.1 MB/s 1164.97 us',
  recv: '{cpml|cb|rcv_tag} recv length 8388608 host memory',
};
const GPU_FORM = {
  ipcPull: '{cpml|proto|cb|init|rk_use} tag_send from cuda/GPU0 length 67108864 rendezvous zero-copy read from remote cuda_ipc/cuda 300000.0 MB/s 200.00 us',
  pushThroughHost: '{cpml|proto|cb|init|rk_use} rndv_put from cuda/GPU0 length 67108864 cuda_copy, write to remote, frag host tcp/lo 1000.0 MB/s 60000.00 us',
  eagerFromGpu: '{cpml|proto|init} tag_send from cuda/GPU0 length 8193 eager zero-copy copy-out tcp/lo 10.2 MB/s 767.92 us',
  gdr: '{cpml|proto|cb|init|rk_use} tag_send from cuda/GPU0 length 67108864 rendezvous zero-copy read from remote rc_mlx5/mlx5_0:1 20000.0 MB/s 3000.00 us',
};

describe('UCX protocol descriptions', () => {
  it('are taken apart: operation, memory, description, transports', () => {
    expect(parseProtocol(OBSERVED.tcpEager)).toEqual({
      text: 'tag_send from host memory length 8193 eager zero-copy copy-out tcp/lo 10.2 MB/s 767.92 us',
      operation: 'tag_send', memoryType: 'host', description: 'eager zero-copy copy-out', transports: ['tcp'], receiverPulled: false,
    });
    expect(parseProtocol(OBSERVED.shmRndv)).toMatchObject({ operation: 'rndv_send', description: 'fragmented copy-in copy-out', transports: ['sysv'] });
    expect(parseProtocol(OBSERVED.recv)).toMatchObject({ operation: 'recv', memoryType: 'host', transports: [] });
    expect(parseProtocol(GPU_FORM.ipcPull)).toMatchObject({ memoryType: 'cuda', transports: ['cuda_ipc'], receiverPulled: true });
    expect(parseProtocol(GPU_FORM.pushThroughHost)).toMatchObject({ operation: 'rndv_put', transports: ['cuda_copy', 'tcp'] });
    expect(parseProtocol('<no debug info>')).toBeUndefined();
  });

  it('map host to host transfers to their transport', () => {
    for (const text of [OBSERVED.tcpEager, OBSERVED.tcpRndv, OBSERVED.tcpRndvEstimate]) expect(pathOfProtocol(parseProtocol(text)!, 'host', 'host'), text).toBe('tcp');
    for (const text of [OBSERVED.shmShort, OBSERVED.shmRndv]) expect(pathOfProtocol(parseProtocol(text)!, 'host', 'host'), text).toBe('shm');
    expect(pathOfProtocol(parseProtocol(OBSERVED.recv)!, 'host', 'host')).toBeUndefined();
  });

  it('call GPU transfers staged unless they are zero-copy between the two buffers', () => {
    const path = (text: string, local: 'host' | 'cuda', remote: 'host' | 'cuda') => pathOfProtocol(parseProtocol(text)!, local, remote);
    expect(path(GPU_FORM.ipcPull, 'cuda', 'cuda')).toBe('cuda_ipc');
    // The issue-14 case: UCX's estimate says cuda_ipc, but the receiver's buffer is host memory.
    expect(path(GPU_FORM.ipcPull, 'cuda', 'host')).toBe('staged');
    expect(path(GPU_FORM.pushThroughHost, 'cuda', 'host')).toBe('staged');
    expect(path(GPU_FORM.eagerFromGpu, 'cuda', 'cuda')).toBe('staged');
    expect(path(OBSERVED.tcpEager, 'host', 'cuda')).toBe('staged');
    expect(path(GPU_FORM.gdr, 'cuda', 'cuda')).toBe('rdma');
    expect(path(GPU_FORM.gdr, 'cuda', 'host')).toBe('staged');
  });
});
