"""Hogwild training in the style of pytorch/examples' mnist_hogwild (``--cuda``).

The model goes to the device, ``model.share_memory()``, and spawned processes train it in
place; the parent then tests the model they trained. On CUDA the children's writes reach the
parent through IPC. Synthetic digits stand in for MNIST. Prints the JSON facts last.
"""

import argparse
import json

import torch
import torch.multiprocessing as mp
import torch.nn.functional as F
from torch import nn

parser = argparse.ArgumentParser()
parser.add_argument("--cuda", action="store_true", default=False, help="enables CUDA training")
parser.add_argument("--num-processes", type=int, default=1, metavar="N")
parser.add_argument("--seed", type=int, default=1, metavar="S")


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(64, 32)
        self.fc2 = nn.Linear(32, 10)

    def forward(self, x):
        return F.log_softmax(self.fc2(F.relu(self.fc1(x.flatten(1)))), dim=1)


def digits(train):
    generator = torch.Generator().manual_seed(0 if train else 1)
    images = torch.randn(128 if train else 64, 8, 8, generator=generator)
    labels = (images.sum(dim=(1, 2)) > 0).long()
    return torch.utils.data.TensorDataset(images, labels)


def train(rank, args, model, device, dataset):
    torch.manual_seed(args.seed + rank)
    loader = torch.utils.data.DataLoader(dataset, batch_size=16, shuffle=True)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.5)
    model.train()
    for data, target in loader:
        optimizer.zero_grad()
        loss = F.nll_loss(model(data.to(device)), target.to(device))
        loss.backward()
        optimizer.step()


def test(model, device, dataset):
    model.eval()
    test_loss, correct = 0.0, 0
    with torch.no_grad():
        for data, target in torch.utils.data.DataLoader(dataset, batch_size=32):
            output = model(data.to(device))
            test_loss += F.nll_loss(output, target.to(device), reduction="sum").item()
            correct += output.argmax(dim=1).eq(target.to(device)).sum().item()
    return test_loss / len(dataset), correct


if __name__ == "__main__":
    args = parser.parse_args()
    use_cuda = args.cuda and torch.cuda.is_available()
    device = torch.device("cuda" if use_cuda else "cpu")

    torch.manual_seed(args.seed)
    mp.set_start_method("spawn", force=True)

    model = Net().to(device)
    model.share_memory()  # gradients are allocated lazily, so they are not shared here
    before = [p.detach().clone() for p in model.parameters()]

    processes = []
    for rank in range(args.num_processes):
        p = mp.Process(target=train, args=(rank, args, model, device, digits(True)))
        p.start()
        processes.append(p)
    for p in processes:
        p.join()

    test_loss, correct = test(model, device, digits(False))
    after = [p.detach() for p in model.parameters()]
    trained = any(not torch.equal(b, a) for b, a in zip(before, after, strict=True))
    facts = {
        "trained": trained,
        "test_loss": test_loss,
        "correct": correct,
        "weights": [p.detach().cpu().flatten()[:4].tolist() for p in model.parameters()],
        "device": str(next(model.parameters()).device),
    }
    print(json.dumps(facts))
