"""torchvision's resnet18 and resnet50: `torch.save(model.state_dict())` files, loaded by
ftopt's models::resnet18/50, give torchvision's logits to 1e-5 (eval mode, batch-norm running
statistics made non-trivial so they matter)."""
import torch
import torchvision

from peer import Peer

peer = Peer("resnet")
x = torch.randn(2, 3, 64, 64)
peer.save("input.safetensors", {"x": x})
for arch in ("resnet18", "resnet50"):
    model = getattr(torchvision.models, arch)(num_classes=10)
    with torch.no_grad():
        for name, buffer in model.named_buffers():
            if name.endswith("running_mean"):
                buffer.copy_(torch.randn_like(buffer) * 0.1)
            elif name.endswith("running_var"):
                buffer.copy_(torch.rand_like(buffer) + 0.5)
    model.eval()
    torch.save(model.state_dict(), peer.path(arch + ".pt"))
    with torch.no_grad():
        expected = model(x)
    peer.ftopt("logits", arch)
    got = peer.load(arch + ".ftopt.safetensors")["logits"]
    peer.close(f"{arch} logits (torchvision {torchvision.__version__})", got, expected, atol=1e-5)
peer.done()
