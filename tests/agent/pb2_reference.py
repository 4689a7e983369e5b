#!/usr/bin/python3
"""Reference numbers for tests/agent/pb2_test.cpp, computed with numpy.

The time-varying GP of PB2 (src/decision/gp.hpp) on a fixed dataset: posterior means and latent
variances at fixed points and the log marginal likelihood for fixed kernels, and the kernel
the grid fit chooses (the variance at its exact maximiser y' R^-1 y / n). Prints C++
initialisers; pb2_test.cpp embeds them.

    /usr/bin/python3 tests/agent/pb2_reference.py
"""
import itertools

import numpy as np

T = np.array([-3.0, -2.0, -2.0, -1.0, 0.0, 0.0])
X = np.array([[0.1, 0.2], [0.4, 0.9], [0.8, 0.3], [0.5, 0.5], [0.2, 0.7], [0.9, 0.8]])
Y = np.array([0.5, -1.2, 1.1, 0.3, -0.4, 1.6])
QUERIES = [(0.0, [0.3, 0.4]), (-1.5, [0.7, 0.6]), (2.0, [0.0, 1.0])]
JITTER = 1e-10

# Same grids as src/decision/gp.hpp.
LENGTHSCALES = [0.05, 0.1, 0.2, 0.35, 0.5, 0.75, 1.0, 1.5]
EPSILONS = [0.0, 0.01, 0.03, 0.1, 0.2, 0.5]
NOISE_RATIOS = [1e-3, 1e-2, 0.05, 0.2, 1.0]


def kernel(t1, x1, t2, x2, l, v, e):
    d2 = np.sum((np.asarray(x1) - np.asarray(x2)) ** 2)
    return v * np.exp(-d2 / (2 * l * l)) * (1 - e) ** (abs(t1 - t2) / 2)


def gram(l, v, e):
    n = len(T)
    return np.array([[kernel(T[i], X[i], T[j], X[j], l, v, e) for j in range(n)] for i in range(n)])


def posterior(l, v, e, noise):
    n = len(T)
    K = gram(l, v, e) + (noise + JITTER * v) * np.eye(n)
    L = np.linalg.cholesky(K)
    alpha = np.linalg.solve(K, Y)
    lml = -0.5 * Y @ alpha - np.sum(np.log(np.diag(L))) - 0.5 * n * np.log(2 * np.pi)
    preds = []
    for tq, xq in QUERIES:
        ks = np.array([kernel(tq, xq, T[i], X[i], l, v, e) for i in range(n)])
        mean = ks @ alpha
        var = kernel(tq, xq, tq, xq, l, v, e) - ks @ np.linalg.solve(K, ks)
        preds.append((mean, var))
    return lml, preds


def grid_fit():
    n = len(T)
    best = None
    for l, e, g in itertools.product(LENGTHSCALES, EPSILONS, NOISE_RATIOS):
        R = gram(l, 1.0, e) + (g + JITTER) * np.eye(n)
        q = Y @ np.linalg.solve(R, Y)
        s2 = max(q / n, 1e-8)
        _, logdet = np.linalg.slogdet(R)
        lml = -0.5 * q / s2 - 0.5 * n * np.log(s2) - 0.5 * logdet - 0.5 * n * np.log(2 * np.pi)
        if best is None or lml > best[0]:
            best = (lml, l, s2, e, g * s2)
    return best


def main():
    for name, (l, v, e, noise) in [("kTimeVarying", (0.3, 1.5, 0.1, 0.05)),
                                    ("kStatic", (0.3, 1.5, 0.0, 0.05))]:
        lml, preds = posterior(l, v, e, noise)
        print(f"// {name}: lengthscale {l}, variance {v}, epsilon {e}, noise {noise}")
        print(f"constexpr double {name}Lml = {lml:.17g};")
        print(f"constexpr Expected {name}[] = {{")
        for m, var in preds:
            print(f"    {{{m:.17g}, {var:.17g}}},")
        print("};")
    lml, l, s2, e, noise = grid_fit()
    print("// grid fit: lml, lengthscale, variance, epsilon, noise")
    print(f"constexpr double kFitLml = {lml:.17g};")
    print(f"constexpr double kFitLengthscale = {l:.17g};")
    print(f"constexpr double kFitVariance = {s2:.17g};")
    print(f"constexpr double kFitEpsilon = {e:.17g};")
    print(f"constexpr double kFitNoise = {noise:.17g};")


if __name__ == "__main__":
    main()
