"""The transformer block of the GPU training tests (test_autograd_gpu.py, test_sdpa_backward_gpu.py):
pre-norm attention + MLP, the attention in bf16. Each file's subclass says how it attends."""
import torch


class PreNormBlock(torch.nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.norm = torch.nn.LayerNorm(dim)
        self.qkv = torch.nn.Linear(dim, 3 * dim)
        self.o = torch.nn.Linear(dim, dim)
        self.mlp = torch.nn.Sequential(torch.nn.LayerNorm(dim), torch.nn.Linear(dim, 4 * dim), torch.nn.GELU(),
                                       torch.nn.Linear(4 * dim, dim))

    def attend(self, qkv):
        """qkv: [batch, seq, 3, heads, head_dim] in bf16; returns [batch, seq, heads, head_dim]."""
        raise NotImplementedError

    def forward(self, x):
        b, s, dim = x.shape
        qkv = self.qkv(self.norm(x)).view(b, s, 3, self.heads, dim // self.heads).to(torch.bfloat16)
        x = x + self.o(self.attend(qkv).reshape(b, s, dim).float())
        return x + self.mlp(x)
