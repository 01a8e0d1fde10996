"""The models and data the demos train: mlp (the from-scratch demos' small models, Chapter 1),
llama (a tiny Llama and its token stream), mixtral (a small Mixtral, Chapter 9), resnet, data
(CIFAR-10 and handwritten digits, Chapter 9).
"""
