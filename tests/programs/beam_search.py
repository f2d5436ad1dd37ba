"""Beam-search decoding written like openai/whisper's ``BeamSearchDecoder``.

Whisper keeps the running sums of log-probabilities on the model's device, ranks the
candidates of each beam in Python, and in ``finalize`` tops up the beams that did not
finish with ``np.argsort(sum_logprobs.cpu()[i])``: NumPy given a CPU tensor, which it
reads through ``Tensor.__array__`` (``argsort`` falls back to it when the tensor's own
``argsort`` rejects NumPy's keywords) and wraps back with ``Tensor.__array_wrap__``.
The decoder is a tiny seeded model; the script prints its facts as one JSON line.
"""

import json

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

device = "cuda" if torch.cuda.is_available() else "cpu"


class TinyDecoder(nn.Module):
    def __init__(self, n_vocab: int, n_state: int) -> None:
        super().__init__()
        self.token_embedding = nn.Embedding(n_vocab, n_state)
        self.mix = nn.Linear(n_state, n_state)
        self.out = nn.Linear(n_state, n_vocab)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        steps = (1 + torch.arange(tokens.shape[1]))[:, None].to(tokens.device)
        x = self.token_embedding(tokens).cumsum(dim=1) / steps
        return self.out(torch.tanh(self.mix(x)))


class BeamSearchDecoder:
    def __init__(self, beam_size: int, eot: int) -> None:
        self.beam_size = beam_size
        self.eot = eot
        self.finished_sequences: list[dict[tuple[int, ...], float]] = []

    def update(self, tokens, logits, sum_logprobs):
        n_audio = tokens.shape[0] // self.beam_size
        if not self.finished_sequences:
            self.finished_sequences = [{} for _ in range(n_audio)]
        logprobs = F.log_softmax(logits.float(), dim=-1)
        next_tokens, source_indices, finished_sequences = [], [], []
        for i in range(n_audio):
            scores, sources, finished = {}, {}, {}
            for j in range(self.beam_size):
                idx = i * self.beam_size + j
                prefix = tokens[idx].tolist()
                for logprob, token in zip(*logprobs[idx].topk(self.beam_size + 1), strict=False):
                    new_logprob = (sum_logprobs[idx] + logprob).item()
                    sequence = tuple([*prefix, token.item()])
                    scores[sequence] = new_logprob
                    sources[sequence] = idx
            saved = 0
            for sequence in sorted(scores, key=scores.get, reverse=True):
                if sequence[-1] == self.eot:
                    finished[sequence] = scores[sequence]
                else:
                    sum_logprobs[len(next_tokens)] = scores[sequence]
                    next_tokens.append(sequence)
                    source_indices.append(sources[sequence])
                    saved += 1
                    if saved == self.beam_size:
                        break
            finished_sequences.append(finished)
        tokens = torch.tensor(next_tokens, device=tokens.device)
        for previously, newly in zip(self.finished_sequences, finished_sequences, strict=False):
            for seq in sorted(newly, key=newly.get, reverse=True):
                if len(previously) >= self.beam_size:
                    break
                previously[seq] = newly[seq]
        completed = all(len(s) >= self.beam_size for s in self.finished_sequences)
        return tokens, completed

    def finalize(self, preceding_tokens, sum_logprobs):
        for i, sequences in enumerate(self.finished_sequences):
            if len(sequences) < self.beam_size:  # when not enough sequences are finished
                for j in list(np.argsort(sum_logprobs.cpu()[i]))[::-1]:
                    sequence = [*preceding_tokens[i, j].tolist(), self.eot]
                    sequences[tuple(sequence)] = sum_logprobs[i][j].item()
                    if len(sequences) >= self.beam_size:
                        break
        tokens = [[list(seq) for seq in s] for s in self.finished_sequences]
        scores = [list(s.values()) for s in self.finished_sequences]
        return tokens, scores


def main() -> None:
    torch.manual_seed(0)
    n_vocab, eot, beam_size, n_audio, sample_len = 24, 0, 3, 2, 6
    model = TinyDecoder(n_vocab, 16).to(device).eval()
    decoder = BeamSearchDecoder(beam_size, eot)
    tokens = torch.tensor([[5], [9]], device=device).repeat_interleave(beam_size, dim=0)
    sum_logprobs = torch.zeros(n_audio * beam_size, device=device)
    with torch.no_grad():
        for _ in range(sample_len):
            logits = model(tokens)[:, -1]
            next_tokens, completed = decoder.update(tokens, logits, sum_logprobs)
            tokens = torch.cat([tokens, next_tokens[:, -1:]], dim=-1)
            if completed:
                break
    tokens = tokens.reshape(n_audio, beam_size, -1)
    sum_logprobs = sum_logprobs.reshape(n_audio, beam_size)
    sequences, scores = decoder.finalize(tokens, sum_logprobs)
    ranked = np.argsort(sum_logprobs.cpu()[0])
    print(
        json.dumps(
            {
                "sequences": sequences,
                "scores": scores,
                "ranked": ranked.tolist(),
                "ranked_type": type(ranked).__name__,
                "ranked_dtype": str(ranked.dtype),
            }
        )
    )


if __name__ == "__main__":
    main()
