"""A scikit-learn script as SageMaker's scikit-learn containers run it: its data from the
train channel (or made up, where the job has none), its model saved with joblib into
SM_MODEL_DIR. It prints what its image holds."""

import argparse
import json
import os

import joblib
import numpy as np
import pandas
import scipy
import sklearn
from sklearn import svm

parser = argparse.ArgumentParser()
parser.add_argument("--epochs", type=int, default=-1)
parser.add_argument("--model-dir", default=os.environ["SM_MODEL_DIR"])
parser.add_argument("--train", default=os.environ.get("SM_CHANNEL_TRAIN"))
args = parser.parse_args()

if args.train:
    data = np.load(os.path.join(args.train, "train.npz"))
    features, labels = data["x"], data["y"]
else:
    generator = np.random.default_rng(0)
    features = generator.random((64, 8))
    labels = (features[:, 0] > 0.5).astype(np.int32)
classifier = svm.SVC(gamma=0.001, C=100.0, max_iter=args.epochs).fit(features, labels)
joblib.dump(classifier, os.path.join(args.model_dir, "model.joblib"))
held = {
    "sklearn": sklearn.__version__,
    "numpy": np.__version__,
    "scipy": scipy.__version__,
    "pandas": pandas.__version__,
    "joblib": joblib.__version__,
    "samples": len(labels),
}
print("holds " + json.dumps(held, sort_keys=True), flush=True)
