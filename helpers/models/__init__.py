"""The models and data the demos train: llama (a tiny Llama and its token stream), resnet,
data (CIFAR-10 and handwritten digits, Chapter 9).
"""
