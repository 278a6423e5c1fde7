#!/usr/bin/env python3
"""DualPipeV's step, call for call, played with free communication: the reference that
tests/training_pipeline_test.cpp (DualPipeVMatchesAnEmulationOfItsCode) checks the schedule against.

It follows deepseek-ai/DualPipe's dualpipe/dualpipev.py (commit 3da1bbe) on each rank: the calls
to _forward_chunk, _backward_chunk, _forward_backward_chunk and _weight_chunk, and the receives
and sends they post. A batch (_commit_and_wait_comm) issues what was posted since the last one
and waits for its receives: a receive completes once the matching send was issued. Passes take
F, B (input gradients) and W per chunk; a whole backward is B then W in one call. Rendezvous
(a send also waiting for its receive to be posted) is not played, as the simulator does not play
it. Prints the makespan for each F:B:W and (p, m) of the test.
"""


def rank_calls(p, m, r):
    """The ordered tokens of rank r: ('recv'|'send', message), ('commit',), ('pass', kind)."""
    tokens = []
    first, last = r == 0, r == p - 1
    count = {key: [0, 0] for key in ('F', 'B', 'recv_f', 'recv_b', 'send_f', 'send_b')}
    deferred = []

    def vstage(c):
        return r if c == 0 else 2 * p - 1 - r

    def post(kind, what, c, to_stage):
        tokens.append((kind, (what, count[kind + '_' + what[0]][c], to_stage)))
        count[kind + '_' + what[0]][c] += 1

    def recv_f(c):
        if not ((first and c == 0) or (last and c == 1)):
            post('recv', 'f', c, vstage(c))

    def send_f(c):
        if not ((first and c == 1) or (last and c == 0)):
            post('send', 'f', c, vstage(c) + 1)

    def recv_b(c):
        if not ((first and c == 1) or (last and c == 0)):
            post('recv', 'b', c, vstage(c))

    def send_b(c):
        if not ((first and c == 0) or (last and c == 1)):
            post('send', 'b', c, vstage(c) - 1)

    def commit():
        tokens.append(('commit',))

    def backward(c, defer):
        tokens.append(('pass', 'B'))
        if defer:
            deferred.append(c)
        else:
            tokens.append(('pass', 'W'))

    def forward_chunk(c, recv=True, send=True):
        if recv:
            recv_f(c)
        commit()
        tokens.append(('pass', 'F'))
        if send:
            send_f(c)

    def backward_chunk(c, defer=False, recv=True, send=True):
        if recv:
            recv_b(c)
        commit()
        backward(c, defer)
        if send:
            send_b(c)

    def forward_backward_chunk(c0, c1, recv0=True):
        if recv0:
            recv_f(c0)
        recv_b(c1)
        commit()
        tokens.append(('pass', 'F'))
        backward(c1, False)
        send_f(c0)
        send_b(c1)

    def weight_chunk():
        commit()
        deferred.pop(0)
        tokens.append(('pass', 'W'))

    for _ in range((p - r - 1) * 2):
        forward_chunk(0)
    recv_f(0)
    for i in range(r + 1):
        forward_chunk(0, recv=False, send=False)
        recv_f(0)
        forward_chunk(1, send=(not last) or (i < r))
        send_f(0)
    for _ in range(p - r - 1):
        backward_chunk(1, defer=True)
        recv_f(1)
        weight_chunk()
        forward_chunk(1, recv=False)
    for i in range(m - 2 * p + r + 1):
        if i == 0 and last:
            forward_chunk(0, recv=False, send=False)
            send_f(1)
            backward_chunk(1, send=False)
            send_f(0)
            send_b(1)
        else:
            forward_backward_chunk(0, 1, recv0=i > 0)
        forward_backward_chunk(1, 0)
    for _ in range(p - r - 1):
        backward_chunk(1)
        forward_backward_chunk(1, 0)
    defer = False
    for i in range(r + 1):
        if i == (r + 1) // 2 and r % 2 == 1:
            defer = True
        backward_chunk(1, defer)
        if i == (r + 1) // 2 and r % 2 == 0:
            defer = True
        backward_chunk(0, defer)
    for _ in range(p - r - 1):
        weight_chunk()
        backward_chunk(0, defer=True)
    for _ in range(r + 1):
        weight_chunk()
    commit()
    return tokens


def makespan(p, m, duration):
    calls = [rank_calls(p, m, r) for r in range(p)]
    sent = {}  # message -> time its send was issued
    at = [0] * p
    now = [0] * p
    posted = [[] for _ in range(p)]
    progress = True
    while progress:
        progress = False
        for r in range(p):
            while at[r] < len(calls[r]):
                token = calls[r][at[r]]
                if token[0] in ('recv', 'send'):
                    posted[r].append(token)
                elif token[0] == 'pass':
                    now[r] += duration[token[1]]
                else:  # a batch: issue, then wait for its receives
                    for kind, message in posted[r]:
                        if kind == 'send':
                            sent.setdefault(message, now[r])
                    receives = [message for kind, message in posted[r] if kind == 'recv']
                    if any(message not in sent for message in receives):
                        break
                    now[r] = max([now[r]] + [sent[message] for message in receives])
                    posted[r] = []
                at[r] += 1
                progress = True
    assert all(at[r] == len(calls[r]) for r in range(p)), 'deadlock'
    return max(now)


if __name__ == '__main__':
    for f, b, w in ((2, 5, 1), (3, 2, 4)):
        for p in (2, 3, 4, 8):
            print(f'F:B:W {f}:{b}:{w} p={p}:',
                  ' '.join(f'm={m} {makespan(p, m, {"F": f, "B": b, "W": w})}' for m in (2 * p, 3 * p + 1)))
