"""The models and data the demos train: mlp (the from-scratch demos' small models, Chapter 1),
llama (a tiny Llama, its token stream and a fixed data set of it), mixtral (a small Mixtral,
Chapter 9), resnet, data (CIFAR-10 and handwritten digits, Chapter 9), and shape (a decoder's
shape, the numbers every cost model and layout rule reads).
"""
