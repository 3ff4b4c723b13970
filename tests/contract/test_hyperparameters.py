from __future__ import annotations

from contract.hyperparameters import decode, split_framework, to_cli_args


def test_decodes_json_encoded_and_plain_values() -> None:
    raw = {
        "epochs": "3",
        "lr": "0.1",
        "name": '"resnet"',
        "plain": "resnet",
        "flag": "true",
        "list": "[1, 2]",
    }
    assert decode(raw) == {
        "epochs": 3,
        "lr": 0.1,
        "name": "resnet",
        "plain": "resnet",
        "flag": True,
        "list": [1, 2],
    }


def test_framework_parameters_are_kept_apart() -> None:
    user, framework = split_framework(
        {"epochs": 3, "sagemaker_program": "train.py", "sagemaker_region": "x"}
    )
    assert user == {"epochs": 3}
    assert framework == {"sagemaker_program": "train.py", "sagemaker_region": "x"}


def test_the_tuning_objective_is_no_argument_of_the_script() -> None:
    """SageMaker adds it to a tuning job's training jobs; its toolkit passes it not."""
    user, framework = split_framework({"epochs": 3, "_tuning_objective_metric": "loss"})
    assert user == {"epochs": 3}
    assert framework == {"_tuning_objective_metric": "loss"}
    assert to_cli_args(user) == ["--epochs", "3"]


def test_cli_args_are_sorted_argv_pairs() -> None:
    args = to_cli_args(
        {
            "lr": 0.1,
            "b": 32,
            "verbose": True,
            "name": "a b; rm -rf /",
            "sizes": [1, 2],
            "opt": {"y": 2, "x": 1},
        }
    )
    assert args == [
        "-b",
        "32",
        "--lr",
        "0.1",
        "--name",
        "a b; rm -rf /",  # one argv element: no shell ever sees it
        "--opt",
        "x=1,y=2",
        "--sizes",
        "[1, 2]",
        "--verbose",
        "True",
    ]
