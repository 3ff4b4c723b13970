from runyard.cli import main

main()
