"""An LSTM language model in the style of pytorch/examples' word_language_model (``--cuda``).

Trains one epoch on a small synthetic corpus, evaluates perplexity, then samples words with
``torch.multinomial``. Prints the JSON facts last.
"""

import argparse
import json
import math

import torch
from torch import nn

parser = argparse.ArgumentParser()
parser.add_argument("--cuda", action="store_true", help="use CUDA")
parser.add_argument("--dropout", type=float, default=0.2)
parser.add_argument("--seed", type=int, default=1111)
args = parser.parse_args()

torch.manual_seed(args.seed)
if torch.cuda.is_available() and not args.cuda:
    print("WARNING: You have a CUDA device, so you should probably run with --cuda")
device = torch.device("cuda" if args.cuda else "cpu")

# A corpus of 64 "words" with some structure: each word is often followed by the next one.
vocab, length = 64, 6000
corpus_gen = torch.Generator().manual_seed(0)
steps = torch.randint(0, 3, (length,), generator=corpus_gen)
corpus = torch.cumsum(steps, 0) % vocab


def batchify(data, bsz):
    nbatch = data.size(0) // bsz
    data = data.narrow(0, 0, nbatch * bsz)
    return data.view(bsz, -1).t().contiguous().to(device)


train_data = batchify(corpus[:5000], 20)
val_data = batchify(corpus[5000:], 10)


class RNNModel(nn.Module):
    def __init__(self, ntoken, ninp, nhid, nlayers, dropout):
        super().__init__()
        self.drop = nn.Dropout(dropout)
        self.encoder = nn.Embedding(ntoken, ninp)
        self.rnn = nn.LSTM(ninp, nhid, nlayers, dropout=dropout)
        self.decoder = nn.Linear(nhid, ntoken)
        self.nhid, self.nlayers = nhid, nlayers
        nn.init.uniform_(self.encoder.weight, -0.1, 0.1)
        nn.init.zeros_(self.decoder.bias)
        nn.init.uniform_(self.decoder.weight, -0.1, 0.1)

    def forward(self, input, hidden):
        emb = self.drop(self.encoder(input))
        output, hidden = self.rnn(emb, hidden)
        output = self.drop(output)
        decoded = self.decoder(output).view(-1, self.decoder.out_features)
        return nn.functional.log_softmax(decoded, dim=1), hidden

    def init_hidden(self, bsz):
        weight = next(self.parameters())
        return (
            weight.new_zeros(self.nlayers, bsz, self.nhid),
            weight.new_zeros(self.nlayers, bsz, self.nhid),
        )


model = RNNModel(vocab, 32, 32, 2, args.dropout).to(device)
criterion = nn.NLLLoss()
bptt, lr = 20, 5.0


def repackage_hidden(h):
    return tuple(v.detach() for v in h)


def get_batch(source, i):
    seq_len = min(bptt, len(source) - 1 - i)
    return source[i : i + seq_len], source[i + 1 : i + 1 + seq_len].reshape(-1)


def evaluate(data_source):
    model.eval()
    total_loss = 0.0
    hidden = model.init_hidden(10)
    with torch.no_grad():
        for i in range(0, data_source.size(0) - 1, bptt):
            data, targets = get_batch(data_source, i)
            output, hidden = model(data, hidden)
            hidden = repackage_hidden(hidden)
            total_loss += len(data) * criterion(output, targets).item()
    return total_loss / (len(data_source) - 1)


model.train()
hidden = model.init_hidden(20)
losses = []
for i in range(0, train_data.size(0) - 1, bptt):
    data, targets = get_batch(train_data, i)
    hidden = repackage_hidden(hidden)
    model.zero_grad()
    output, hidden = model(data, hidden)
    loss = criterion(output, targets)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 0.25)
    for p in model.parameters():
        p.data.add_(p.grad, alpha=-lr)
    losses.append(loss.item())
val_loss = evaluate(val_data)

# generate.py: sample words one at a time
model.eval()
hidden = model.init_hidden(1)
input = torch.randint(vocab, (1, 1), dtype=torch.long).to(device)
words = []
with torch.no_grad():
    for _ in range(50):
        output, hidden = model(input, hidden)
        word_weights = output.squeeze().exp().cpu()
        word_idx = torch.multinomial(word_weights, 1)[0]
        input.fill_(word_idx)
        words.append(int(word_idx))

print(json.dumps({"losses": losses, "val_ppl": math.exp(val_loss), "words": words}))
