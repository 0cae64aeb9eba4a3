# expect: overflow from check_online_softmax(online_softmax)
patch("m, total, acc = torch.tensor(-math.inf)", "m, total, acc = torch.tensor(0.0)")
