"""Chapter 9: the ResNet demo's evaluation script (examples/images/resnet/eval.py), same options.

    python -m helpers.demos.ch09_resnet_eval -c ./ckpt-single -e 80 [--data digits]

One process, no Booster: ``model_E.pth`` as ``booster.save_model`` writes it (unsharded) is a
plain state dict of the unwrapped model, so the model the training script built loads it
directly. Loading copies into fp32 parameters, so a checkpoint of an fp16 plugin loads too.
"""

import torch

from helpers.models.data import datasets
from helpers.models.resnet import model_for
from helpers.run import cli
from helpers.run.env import choose_backend, deterministic, emit, say
from helpers.run.result_types.ch09 import ResnetEvalResult
from helpers.train.resnet import accuracy


def main() -> None:
    p = cli.parser(__doc__)
    p.add_argument("-c", "--checkpoint", required=True, help="the training run's checkpoint folder")
    p.add_argument("-e", "--epoch", type=int, required=True, help="evaluate model_EPOCH.pth")
    p.add_argument("--data", choices=("digits", "cifar10"), default="cifar10")
    args = p.parse_args()
    _, device = choose_backend(1)  # the launcher's rule, as for the training script
    deterministic()
    model = model_for(args.data).to(device)
    state = torch.load(f"{args.checkpoint}/model_{args.epoch}.pth", map_location=device)
    model.load_state_dict(state)
    _, test_set = datasets(args.data)
    acc = accuracy(model, test_set, device)
    say(
        f"Accuracy of the model on the {len(test_set)} test images after epoch {args.epoch}: "
        f"{acc * 100:.2f} %"
    )
    emit(
        ResnetEvalResult,
        epoch=args.epoch,
        accuracy=round(acc, 4),
        data=args.data,
        test_images=len(test_set),
    )


if __name__ == "__main__":
    main()
